"""Headers in a stream file: the text-safe ``rs1:`` / ``rs2:`` envelope RustStream services use.

A stream-file frame has no place for headers, so a message with headers is wrapped: the prefix,
then standard padded base64 of ``[u32 BE block length][block][payload]``.

- ``rs1:`` when every header name is UTF-8 without ``:``, and every name and value is UTF-8
  without ``\\r``/``\\n`` and without leading or trailing whitespace: the block is
  ``name: value\\n`` per header, readable by eye after base64-decoding;
- ``rs2:`` otherwise: the block is ``([u32 BE name length][name][u32 BE value length][value])*``.

A payload without headers is written verbatim, so any SeaStreamer reader reads it as it was
sent, unless it begins with ``rs1:`` or ``rs2:`` itself: then it is enveloped (with no
headers), or a reader would take it for an envelope. On reading, anything that is not a
well-formed envelope (bad base64, too short, a malformed block, names or values that are not
UTF-8) is a headerless payload, delivered exactly as it is in the file.

Whitespace is Unicode ``White_Space``, the set Rust's ``char::is_whitespace`` uses, so both
sides choose the same prefix for the same headers. Pure functions, no I/O.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Mapping

from ..core.errors import TrioStreamsError

__all__ = ["PREFIXES", "STORAGE_HEADERS", "EnvelopeError", "open_envelope", "seal"]

RS1 = b"rs1:"
RS2 = b"rs2:"
#: What an enveloped payload starts with; a payload starting with either is always enveloped.
PREFIXES = (RS1, RS2)

#: Headers that say how a message was stored, not what it carries: a file subscription does not
#: hand them to its handler. ``x-redis-fields`` is a recording's copy of a Redis entry's exact
#: fields (see :mod:`trio_streams.record.fields`), which a handler reading Redis never sees.
STORAGE_HEADERS = frozenset({"x-redis-fields"})

_U32 = struct.Struct(">I")
_NO_HEADERS: Mapping[str, str] = {}

#: Unicode White_Space (what Rust's ``char::is_whitespace`` and ``str::trim`` use).
_WHITESPACE = frozenset(
    "\t\n\v\f\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009"
    "\u200a\u2028\u2029\u202f\u205f\u3000"
)


class EnvelopeError(TrioStreamsError, ValueError):
    """A header cannot be written: its name or value is not encodable as UTF-8."""


def seal(payload: bytes, headers: Mapping[str, str]) -> bytes:
    """The bytes to write in a frame for ``payload`` with ``headers``."""
    if not headers and not payload.startswith(PREFIXES):
        return payload
    encoded = [
        (_utf8(name, "name", name), _utf8(value, "value", name)) for name, value in headers.items()
    ]
    if all(_rs1_safe(name, value) for name, value in headers.items()):
        prefix = RS1
        block = b"".join(name + b": " + value + b"\n" for name, value in encoded)
    else:
        prefix = RS2
        block = b"".join(
            _U32.pack(len(name)) + name + _U32.pack(len(value)) + value for name, value in encoded
        )
    return prefix + base64.b64encode(_U32.pack(len(block)) + block + payload)


def open_envelope(data: bytes) -> tuple[bytes, Mapping[str, str]]:
    """The payload and headers of frame bytes: an envelope opened, or ``data`` with no headers."""
    if not data.startswith(PREFIXES):
        return data, _NO_HEADERS
    try:
        raw = binascii.a2b_base64(data[4:], strict_mode=True)
    except binascii.Error:
        return data, _NO_HEADERS
    if len(raw) < 4:
        return data, _NO_HEADERS
    (length,) = _U32.unpack_from(raw)
    if 4 + length > len(raw):
        return data, _NO_HEADERS
    block = raw[4 : 4 + length]
    headers = _parse_rs1(block) if data.startswith(RS1) else _parse_rs2(block)
    if headers is None:
        return data, _NO_HEADERS
    return raw[4 + length :], headers


def _utf8(text: str, what: str, name: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise EnvelopeError(
            f"header {name!r}: the {what} is not encodable as UTF-8 ({exc.reason})"
        ) from None


def _rs1_safe(name: str, value: str) -> bool:
    if ":" in name:
        return False
    for text in (name, value):
        if "\n" in text or "\r" in text:
            return False
        if text and (text[0] in _WHITESPACE or text[-1] in _WHITESPACE):
            return False
    return True


def _parse_rs1(block: bytes) -> dict[str, str] | None:
    """``name: value\\n`` lines; None if the block is not exactly that."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if text and not text.endswith("\n"):
        return None
    headers: dict[str, str] = {}
    for line in text.split("\n")[:-1]:
        name, sep, value = line.partition(":")
        if not sep or not value.startswith(" ") or "\r" in line:
            return None
        headers[name] = value[1:]
    return headers


def _parse_rs2(block: bytes) -> dict[str, str] | None:
    """Length-prefixed name/value pairs filling the block exactly; None otherwise."""
    headers: dict[str, str] = {}
    at = 0
    end = len(block)
    try:
        while at < end:
            fields = []
            for _ in range(2):
                if at + 4 > end:
                    return None
                (size,) = _U32.unpack_from(block, at)
                at += 4
                if at + size > end:
                    return None
                fields.append(block[at : at + size].decode("utf-8"))
                at += size
            headers[fields[0]] = fields[1]
    except UnicodeDecodeError:
        return None
    return headers
