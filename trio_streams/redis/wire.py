"""Redis stream entries on the wire, and the replies the stream transport reads.

Pure functions, no I/O, so every shape is tested on its own:

- **Entries** carry the payload in field ``_payload`` and each header in a field ``h:<name>``
  whose name and value are UTF-8 (the layout RustStream's Redis transport uses). Other fields
  are ignored on read.
- **Foreign entries**, which another producer wrote without that layout — no ``_payload``, or
  a header name or value that is not UTF-8 — still deliver, with no headers, and with nothing
  of them changed or lost: the payload is the entry's fields as JSON (:func:`fields_payload`).
  When every field name is UTF-8 and given once, a JSON object in the entry's order (so a JSON
  handler can take a ``dict``); otherwise the flat field list as a JSON array, ``[name, value,
  ...]``. Either way a value (or, in the array, a name) is a string when it is UTF-8 and
  ``{"base64": "..."}`` when it is not — the convention a recording uses for the exact fields
  it keeps (:mod:`trio_streams.record.fields`). :func:`entry_fields` gives the bytes back. A
  retry copy or a dead letter of a foreign entry carries that payload, so the same bytes.
- **Replies** are read in both protocols: under RESP3 ``XREADGROUP`` answers a map, under RESP2
  a list of ``[key, entries]`` pairs; an entry is ``[id, fields]`` with ``fields`` a flat list,
  or nil when the entry was deleted (or trimmed) while it was pending.
- **Entry ids** are ``<ms>-<seq>``; :func:`id_before` gives the id just before one, so a group
  created there delivers that entry first (positions are inclusive).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..core.errors import TrioStreamsError
from ..core.positions import MAX_SEQUENCE, Position, PositionKind

__all__ = [
    "HEADER_PREFIX",
    "LAYOUT_HINT",
    "PAYLOAD_FIELD",
    "Entry",
    "ForeignPayloadError",
    "ReplyShapeError",
    "decode_fields",
    "encode_fields",
    "entry_fields",
    "entry_position",
    "field_bytes",
    "field_item",
    "fields_payload",
    "id_before",
    "layout_hint",
    "parse_autoclaim",
    "parse_consumers",
    "parse_entries",
    "parse_pending",
    "parse_read",
    "quiet_ms",
    "split_id",
    "stream_entries",
    "text",
]

PAYLOAD_FIELD = b"_payload"
HEADER_PREFIX = "h:"
#: Added to the reason a foreign entry (no ``_payload`` field) could not be decoded for.
LAYOUT_HINT = (
    "the entry has no '_payload' field, so the handler got its fields as a JSON object "
    "of strings; write entries as XADD KEY * _payload <json> (headers as h:<name> fields), "
    "or publish with broker.publish"
)
_HEADER_PREFIX_BYTES = HEADER_PREFIX.encode()


class ReplyShapeError(TrioStreamsError):
    """A server reply was not shaped as the command documents (the message says which)."""


class ForeignPayloadError(TrioStreamsError, ValueError):
    """A payload given to :func:`entry_fields` is not the JSON a foreign entry delivers."""


class Entry(NamedTuple):
    """One stream entry as read: its id, and its fields (None: deleted while pending)."""

    id: str
    fields: list[bytes] | None


def text(value: Any) -> str:
    """A reply value (bytes or str) as text: for what the server names (keys, ids, types),
    never an entry's fields, where a byte that is not UTF-8 must not become U+FFFD."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, str):
        return value
    raise ReplyShapeError(f"expected a string in the reply, got {value!r}")


def encode_fields(payload: bytes, headers: Mapping[str, str]) -> list[bytes | str]:
    """The field/value arguments of ``XADD`` for one message."""
    args: list[bytes | str] = [PAYLOAD_FIELD, payload]
    for name, value in headers.items():
        args.append(HEADER_PREFIX + name)
        args.append(value)
    return args


def decode_fields(fields: Sequence[bytes]) -> tuple[bytes, dict[str, str]]:
    """``(payload, headers)`` of an entry's flat field list (see the module docstring)."""
    count = len(fields)
    if count == 2 and fields[0] == PAYLOAD_FIELD:  # the common entry: a payload, no headers
        return bytes(fields[1]), {}
    if count % 2:
        raise ReplyShapeError(f"an entry's fields come in pairs; got {count} values")
    payload: bytes | None = None
    headers: dict[str, str] = {}
    pairs = iter(fields)
    try:
        for name, value in zip(pairs, pairs, strict=True):
            if name == PAYLOAD_FIELD:
                payload = bytes(value)
            elif name.startswith(_HEADER_PREFIX_BYTES):
                headers[str(name[2:], "utf-8")] = str(value, "utf-8")
    except UnicodeDecodeError:  # a header that is not text: not this layout, a foreign entry
        payload = None
    if payload is None:
        return fields_payload(fields), {}
    return payload, headers


def layout_hint(fields: Sequence[bytes]) -> str | None:
    """:data:`LAYOUT_HINT` for an entry with no ``_payload`` field (a foreign entry), else
    None: a delivery's ``layout_hint``."""
    return None if PAYLOAD_FIELD in fields[::2] else LAYOUT_HINT


def field_item(raw: bytes) -> str | dict[str, str]:
    """One field name or value in the JSON of a foreign entry (and of a recording's exact
    fields): the text when ``raw`` is UTF-8, else ``{"base64": ...}`` of its bytes."""
    try:
        return str(raw, "utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(raw).decode("ascii")}


def field_bytes(item: object) -> bytes:
    """The bytes :func:`field_item` made ``item`` of (:class:`ForeignPayloadError` if it is
    neither a string nor ``{"base64": ...}``)."""
    if isinstance(item, str):
        return item.encode("utf-8")
    if isinstance(item, dict) and len(item) == 1 and isinstance(item.get("base64"), str):
        try:
            return base64.b64decode(item["base64"], validate=True)
        except binascii.Error as exc:
            raise ForeignPayloadError(f"bad base64 in {item!r}: {exc}") from None
    raise ForeignPayloadError(f"a field is neither a string nor {{'base64': ...}}: {item!r}")


def fields_payload(fields: Sequence[bytes]) -> bytes:
    """The payload of a foreign entry: its fields as JSON, losslessly (module docstring)."""
    try:
        keys = [str(name, "utf-8") for name in fields[::2]]
    except UnicodeDecodeError:
        keys = []
    if keys:
        values: list[str] | list[str | dict[str, str]]
        try:  # the usual foreign entry is text: decode it all at once
            values = [str(value, "utf-8") for value in fields[1::2]]
        except UnicodeDecodeError:
            values = [field_item(value) for value in fields[1::2]]
        object_ = dict(zip(keys, values, strict=True))
        if len(object_) == len(keys):  # each name once: the object holds every field
            return json.dumps(object_, separators=(",", ":")).encode()
    items = [field_item(part) for part in fields]
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False).encode()


def entry_fields(payload: bytes) -> list[bytes]:
    """The fields of a foreign entry, byte for byte and in order, from the payload it was
    delivered with (:func:`fields_payload`); :class:`ForeignPayloadError` if ``payload`` is
    not such JSON."""
    try:
        decoded = json.loads(payload)
    except ValueError as exc:
        raise ForeignPayloadError(f"not the JSON of a foreign entry: {exc}") from None
    if isinstance(decoded, dict):
        return [
            part
            for key, value in decoded.items()
            for part in (field_bytes(key), field_bytes(value))
        ]
    if isinstance(decoded, list) and decoded and len(decoded) % 2 == 0:
        return [field_bytes(item) for item in decoded]
    raise ForeignPayloadError("not a JSON object, nor an array of field names and values")


def parse_entries(reply: Any) -> list[Entry]:
    """A list of ``[id, fields]`` (fields may be nil) as entries."""
    if reply is None:
        return []
    if not isinstance(reply, list):
        raise ReplyShapeError(f"expected a list of entries, got {reply!r}")
    entries: list[Entry] = []
    append = entries.append
    for item in reply:
        if type(item) is not list or len(item) != 2:
            raise ReplyShapeError(f"expected an entry [id, fields], got {item!r}")
        entry_id, fields = item
        if fields is not None and type(fields) is not list:
            raise ReplyShapeError(f"expected an entry's fields as a list, got {fields!r}")
        append(Entry(entry_id.decode() if type(entry_id) is bytes else text(entry_id), fields))
    return entries


def parse_read(reply: Any) -> dict[str, list[Entry]]:
    """An ``XREAD``/``XREADGROUP`` reply as entries per stream key (empty on a timeout)."""
    if reply is None:
        return {}
    if isinstance(reply, dict):
        pairs: list[Any] = list(reply.items())
    elif isinstance(reply, list):
        pairs = reply
    else:
        raise ReplyShapeError(f"expected a map or list of streams, got {reply!r}")
    streams: dict[str, list[Entry]] = {}
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ReplyShapeError(f"expected [key, entries], got {pair!r}")
        streams[text(pair[0])] = parse_entries(pair[1])
    return streams


def stream_entries(reply: Any, key: str) -> list[Any] | None:
    """The entries of stream ``key`` in an ``XREAD``/``XREADGROUP`` reply, as sent: a list of
    ``[id, fields]`` items, each still to be checked (None on a timeout, or when the reply does
    not name ``key``).

    For a reader of one stream that builds its deliveries straight from the items: no
    :class:`Entry` is made on the way (:func:`parse_read` makes one per entry)."""
    if reply is None:
        return None
    if type(reply) is dict:
        pairs: Any = reply.items()
    elif type(reply) is list:
        pairs = reply
    else:
        raise ReplyShapeError(f"expected a map or list of streams, got {reply!r}")
    found = None
    for pair in pairs:
        if not isinstance(pair, list | tuple) or len(pair) != 2:
            raise ReplyShapeError(f"expected [key, entries], got {pair!r}")
        if text(pair[0]) == key:
            found = pair[1]
    if found is not None and type(found) is not list:
        raise ReplyShapeError(f"expected a list of entries, got {found!r}")
    return found


def parse_autoclaim(reply: Any) -> tuple[str, list[Any], list[str]]:
    """``XAUTOCLAIM``'s ``(next cursor, claimed, deleted ids)``; before 7.0 there is no third
    element (deleted entries then come back among the claimed with nil fields)."""
    if not isinstance(reply, list) or len(reply) not in (2, 3):
        raise ReplyShapeError(f"expected [cursor, claimed(, deleted)], got {reply!r}")
    deleted = [text(i) for i in reply[2]] if len(reply) == 3 and reply[2] else []
    return text(reply[0]), list(reply[1] or []), deleted


def parse_pending(reply: Any) -> dict[str, int]:
    """The extended ``XPENDING`` form's delivery count per entry id."""
    if not isinstance(reply, list):
        raise ReplyShapeError(f"expected a list of pending entries, got {reply!r}")
    counts: dict[str, int] = {}
    for item in reply:
        if not isinstance(item, list) or len(item) != 4:
            raise ReplyShapeError(f"expected [id, consumer, idle, count], got {item!r}")
        counts[text(item[0])] = int(item[3])
    return counts


def quiet_ms(info: Mapping[str, Any]) -> int:
    """Milliseconds since a consumer last read or claimed an entry, from its ``XINFO
    CONSUMERS`` fields (names as str): ``inactive`` where the server reports it (Redis 7.2+,
    Valkey), else ``idle``, which on a server without ``inactive`` means just that (neither
    moves on a read that returns nothing; the newer ``idle`` does). A consumer that never took
    an entry (``inactive`` -1) counts from its last read of any kind (``idle``)."""
    inactive = info.get("inactive")
    if inactive is not None and int(inactive) >= 0:
        return int(inactive)
    return int(info["idle"])


def parse_consumers(reply: Any) -> list[tuple[str, int, int]]:
    """``XINFO CONSUMERS``' ``(name, pending, quiet ms)`` per consumer (RESP3 maps or RESP2
    flat lists); quiet is :func:`quiet_ms`: the same meaning on every server."""
    if not isinstance(reply, list):
        raise ReplyShapeError(f"expected a list of consumers, got {reply!r}")
    consumers: list[tuple[str, int, int]] = []
    for item in reply:
        if isinstance(item, list):
            item = dict(zip(item[::2], item[1::2], strict=True))
        if not isinstance(item, dict):
            raise ReplyShapeError(f"expected a consumer's fields, got {item!r}")
        info = {text(k): v for k, v in item.items()}
        try:
            consumers.append((text(info["name"]), int(info["pending"]), quiet_ms(info)))
        except KeyError as exc:
            raise ReplyShapeError(f"a consumer's fields lack {exc}: {item!r}") from None
    return consumers


def split_id(entry_id: str) -> tuple[int, int]:
    """``(ms, seq)`` of an entry id."""
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


_new = object.__new__
# A position's fields are slots: their descriptors set them without the frozen dataclass'
# __setattr__ (and faster than object.__setattr__, which looks each one up by name).
_set_kind = Position.__dict__["kind"].__set__
_set_value = Position.__dict__["value"].__set__
_set_stream = Position.__dict__["stream"].__set__
_set_shard = Position.__dict__["shard"].__set__
_ENTRY = PositionKind.ENTRY


def entry_position(entry_id: str, stream: str) -> tuple[Position, int]:
    """The position of an entry read off ``stream``, and its time (the id's ms part).

    Built without re-validating (the hot path builds one per delivery): the id comes from the
    server, which only hands out ``<ms>-<seq>`` ids of two u64 parts."""
    ms_text, _, seq_text = entry_id.partition("-")
    ms = int(ms_text)
    position: Position = _new(Position)
    _set_kind(position, _ENTRY)
    _set_value(position, ms << 64 | int(seq_text or 0))
    _set_stream(position, stream)
    _set_shard(position, None)
    return position, ms


def id_before(entry_id: str) -> str:
    """The greatest id before ``entry_id`` (``0-0`` before the first possible id)."""
    ms, seq = split_id(entry_id)
    if seq:
        return f"{ms}-{seq - 1}"
    if ms:
        return f"{ms - 1}-{MAX_SEQUENCE}"
    return "0-0"
