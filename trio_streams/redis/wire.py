"""Redis stream entries on the wire, and the replies the stream transport reads.

Pure functions, no I/O, so every shape is tested on its own:

- **Entries** carry the payload in field ``_payload`` and each header in a field ``h:<name>``
  (the layout RustStream's Redis transport uses). Other fields are ignored on read. An entry
  from another producer without ``_payload`` still delivers: its payload is the entry's fields
  as a JSON object of strings (so a JSON handler can take a ``dict``), and it has no headers.
- **Replies** are read in both protocols: under RESP3 ``XREADGROUP`` answers a map, under RESP2
  a list of ``[key, entries]`` pairs; an entry is ``[id, fields]`` with ``fields`` a flat list,
  or nil when the entry was deleted (or trimmed) while it was pending.
- **Entry ids** are ``<ms>-<seq>``; :func:`id_before` gives the id just before one, so a group
  created there delivers that entry first (positions are inclusive).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ..errors import TrioStreamsError
from ..positions import MAX_SEQUENCE, Position, PositionKind

__all__ = [
    "HEADER_PREFIX",
    "PAYLOAD_FIELD",
    "Entry",
    "ReplyShapeError",
    "decode_fields",
    "encode_fields",
    "entry_position",
    "id_before",
    "parse_autoclaim",
    "parse_consumers",
    "parse_entries",
    "parse_pending",
    "parse_read",
    "stream_entries",
    "text",
]

PAYLOAD_FIELD = b"_payload"
HEADER_PREFIX = "h:"
_HEADER_PREFIX_BYTES = HEADER_PREFIX.encode()


class ReplyShapeError(TrioStreamsError):
    """A server reply was not shaped as the command documents (the message says which)."""


class Entry(NamedTuple):
    """One stream entry as read: its id, and its fields (None: deleted while pending)."""

    id: str
    fields: list[bytes] | None


def text(value: Any) -> str:
    """A reply value (bytes or str) as text."""
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
    for name, value in zip(pairs, pairs, strict=True):
        if name == PAYLOAD_FIELD:
            payload = bytes(value)
        elif name.startswith(_HEADER_PREFIX_BYTES):
            headers[text(name[2:])] = text(value)
    if payload is None:
        raw = {text(fields[i]): text(fields[i + 1]) for i in range(0, count, 2)}
        return json.dumps(raw, separators=(",", ":")).encode(), {}
    return payload, headers


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


def parse_consumers(reply: Any) -> list[tuple[str, int, int]]:
    """``XINFO CONSUMERS``' ``(name, pending, idle ms)`` per consumer (RESP3 maps or RESP2
    flat lists)."""
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
            consumers.append((text(info["name"]), int(info["pending"]), int(info["idle"])))
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
