"""Keeping an entry's exact fields when the payload-and-headers layout cannot hold them.

A stream entry written by trio-streams is ``_payload`` then ``h:<name>`` fields, all of whose
names and header values are UTF-8: :func:`~..redis.wire.decode_fields` reads it into a payload
and headers, and :func:`~..redis.wire.encode_fields` writes the same fields back. Another
producer's entry may not fit that layout: values that are not UTF-8, a field name given twice,
fields beside ``_payload`` that are not headers. Such an entry is recorded as a handler reading
it from Redis sees it (the same payload and headers), and the header
:data:`~.headers.FIELDS_HEADER` keeps its exact fields, so that a replay sends them back byte for
byte. The value is a JSON array of the flat field list (name, value, name, value...): a string
for text that is UTF-8, ``{"base64": "..."}`` for bytes that are not.

An entry with no ``_payload`` whose fields are UTF-8 and named once each is recorded with the
value ``json`` instead: its payload (a JSON object of the fields, in order) already holds them.
The string-or-base64 items are those of a foreign entry's payload
(:func:`~..redis.wire.field_item`), so what a handler reading Redis gets and what a recording
keeps spell bytes the same way.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..redis.wire import PAYLOAD_FIELD, ForeignPayloadError, encode_fields, field_bytes, field_item

__all__ = ["JSON_OBJECT", "BadFieldList", "decode_field_list", "exact_fields"]

#: The marker of an entry whose payload is its fields as a JSON object.
JSON_OBJECT = "json"


class BadFieldList(ValueError):
    """A recorded field list is not a JSON array of strings and ``{"base64": ...}`` objects."""


def _as_bytes(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else bytes(value)


def exact_fields(fields: Sequence[bytes], payload: bytes, headers: dict[str, str]) -> str | None:
    """The value of :data:`~.headers.FIELDS_HEADER` that keeps ``fields`` exactly, or None when
    ``payload`` and ``headers`` (what :func:`~..redis.wire.decode_fields` made of them) give the
    same fields back."""
    if len(fields) == 2 and fields[0] == PAYLOAD_FIELD:
        return None
    has_payload = any(fields[i] == PAYLOAD_FIELD for i in range(0, len(fields), 2))
    if has_payload:
        again = [_as_bytes(part) for part in encode_fields(payload, headers)]
    else:
        try:
            pairs = json.loads(payload)
        except ValueError:  # pragma: no cover - decode_fields writes JSON
            pairs = None
        # The ``json`` marker's replay writes the object's strings back: only for text.
        texts = isinstance(pairs, dict) and all(isinstance(v, str) for v in pairs.values())
        again = [_as_bytes(part) for pair in pairs.items() for part in pair] if texts else []
    if again == [bytes(part) for part in fields]:
        return None if has_payload else JSON_OBJECT
    return encode_field_list(fields)


def encode_field_list(fields: Sequence[bytes]) -> str:
    """``fields`` as a JSON array: text as strings, other bytes as ``{"base64": ...}``."""
    items = [field_item(bytes(part)) for part in fields]
    return json.dumps(items, separators=(",", ":"), ensure_ascii=False)


def decode_field_list(value: str) -> list[bytes]:
    """The fields :func:`encode_field_list` wrote, byte for byte (:class:`BadFieldList` if
    ``value`` is not such an array)."""
    try:
        items = json.loads(value)
    except ValueError as exc:
        raise BadFieldList(f"not JSON: {exc}") from None
    if not isinstance(items, list) or not items or len(items) % 2:
        raise BadFieldList("not a non-empty array of field names and values")
    try:
        return [field_bytes(item) for item in items]
    except ForeignPayloadError as exc:
        raise BadFieldList(str(exc)) from None
