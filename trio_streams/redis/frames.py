"""The value of a Redis list entry or Pub/Sub message: headers and payload in one binary frame.

``[u32 header count]([u32 name length][name][u32 value length][value])*`` then the payload, all
integers big-endian: the frame RustStream's list and Pub/Sub transports use, so services of both
read each other's messages. Names and values are UTF-8.

A value that is not a well-formed frame (shorter than its counts say, a count past the end, a
header that is not UTF-8) is a headerless payload: a plain value another producer pushed
(``LPUSH jobs '{"id": 1}'``) still delivers, whole. A message without headers is framed too
(a zero count), so a payload that happens to look like a frame is never misread.

A reliable list's entry that went back to the list because the consumer holding it died
carries :data:`REDELIVERED_HEADER`, how many times that happened (the reaper's script writes
it, :data:`~.list_scripts.COUNTED`): the delivery's attempt counts it, and handlers never see it.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

__all__ = ["REDELIVERED_HEADER", "decode_frame", "encode_frame", "take_redeliveries"]

#: How many times a reliable list's entry went back to the list from a consumer that died
#: holding it (decimal digits).
REDELIVERED_HEADER = "x-trio-streams-redelivered"

_U32 = struct.Struct(">I")
_NO_HEADERS = b"\x00\x00\x00\x00"


def encode_frame(payload: bytes, headers: Mapping[str, str]) -> bytes:
    """The frame of one message (see the module docstring)."""
    if not headers:
        return _NO_HEADERS + payload
    pack = _U32.pack
    parts = [pack(len(headers))]
    for name, value in headers.items():
        raw_name, raw_value = name.encode(), value.encode()
        parts += (pack(len(raw_name)), raw_name, pack(len(raw_value)), raw_value)
    parts.append(payload)
    return b"".join(parts)


def decode_frame(value: bytes) -> tuple[bytes, dict[str, str]]:
    """``(payload, headers)`` of a list entry or a Pub/Sub message; a value that is not a
    well-formed frame is returned whole, as a payload without headers."""
    size = len(value)
    if size < 4:
        return bytes(value), {}
    if value[:4] == _NO_HEADERS:
        return bytes(value[4:]), {}
    (count,) = _U32.unpack_from(value, 0)
    if count * 8 > size - 4:  # each header takes at least its two lengths
        return bytes(value), {}
    headers: dict[str, str] = {}
    at = 4
    unpack = _U32.unpack_from
    try:
        for _ in range(count):
            (length,) = unpack(value, at)
            name = value[at + 4 : at + 4 + length]
            at += 4 + length
            (length,) = unpack(value, at)
            raw = value[at + 4 : at + 4 + length]
            at += 4 + length
            if at > size:
                return bytes(value), {}
            headers[bytes(name).decode()] = bytes(raw).decode()
    except (struct.error, UnicodeDecodeError):
        return bytes(value), {}
    return bytes(value[at:]), headers


def take_redeliveries(headers: dict[str, str]) -> int:
    """Remove :data:`REDELIVERED_HEADER` from ``headers``; return its count (0 when absent or
    not decimal digits)."""
    raw = headers.pop(REDELIVERED_HEADER, None)
    if raw is None or not (raw.isascii() and raw.isdigit()):
        return 0
    return int(raw)
