"""The pure codec of SeaStreamer stream files (``.ss``): header, frames, beacons and checksums.

Nothing here does I/O. Byte layouts follow the Rust ``sea-streamer-file`` crate exactly; all
integers are big-endian. The checksum is CRC16/CDMA2000, computed by ``fastcrc`` (a Rust
extension): it is the one C-speed implementation of this CRC that measured fast enough to keep
the per-message budget of the reader and writer (see ``benchmarks/file_read.py``).
"""

from __future__ import annotations

import codecs
import re
import struct
from typing import NamedTuple

from fastcrc import crc16 as _crc16

from .errors import (
    BadMagicError,
    BeaconError,
    BeaconIntervalError,
    FileNameError,
    InvalidStreamKeyError,
    TimestampRangeError,
    TruncatedError,
    UnsupportedVersionError,
)

#: Size of the file header; the first frame starts here.
HEADER_SIZE = 128
MAGIC = b"Ss"
VERSION = 1
#: Smallest beacon interval the format allows (the Rust reader and writer assert it).
MIN_BEACON_INTERVAL = 128
#: The beacon interval the Rust crate uses by default: 1 MiB.
DEFAULT_BEACON_INTERVAL = 1 << 20
#: Longest file name the header can hold (the Rust writer panics above it).
MAX_FILE_NAME_BYTES = 111
#: Longest stream key the Rust reader accepts.
MAX_STREAM_KEY_BYTES = 249
#: Last millisecond of the year 9999, the latest timestamp the Rust reader can represent.
MAX_TIMESTAMP_MS = 253_402_300_799_999
MAX_U64 = (1 << 64) - 1
MAX_PAYLOAD_BYTES = (1 << 32) - 1
#: Reserved key of the end-of-stream message (and of in-process pulses, never written).
INTERNAL_KEY = "SEA_STREAMER_INTERNAL"
#: Subscription-only key meaning "every stream but the internal one"; never written.
WILDCARD_KEY = "SEA_STREAMER_WILDCARD"
EOS_PAYLOAD = b"EOS"
#: Fixed part of a frame header after the key: shard, seq, timestamp, payload size.
FRAME_FIXED = struct.Struct(">QQQI")
_MARKER_FIXED = struct.Struct(">QQQH")
_BEACON_HEAD = struct.Struct(">BIB")
_U16 = struct.Struct(">H")
_CRC_TAIL = struct.Struct(">HB")
#: Largest marker the format can hold: 255-byte key + length byte + 26 fixed bytes.
_LARGEST_MARKER = 282

crc16 = _crc16.cdma2000
"""CRC16/CDMA2000 of ``data`` (poly 0xC867, init 0xFFFF, no reflection, no xorout).

``crc16(data, initial)`` continues a running register, which is how beacons chain checksums.
"""

_VALID_KEY = re.compile(rb"[A-Za-z0-9._-]*")


def running_checksum(previous: int, payload_crcs: bytes) -> int:
    """Feed big-endian payload CRCs (2 bytes each) into a running checksum register."""
    return crc16(payload_crcs, previous)


def key_is_valid(key: bytes) -> bool:
    """Whether ``key`` is a stream key the Rust reader accepts (Kafka topic rules, ≤ 249 bytes)."""
    return len(key) <= MAX_STREAM_KEY_BYTES and _VALID_KEY.fullmatch(key) is not None


def encode_key(key: str) -> bytes:
    """The ShortString bytes of a stream key; raises :class:`InvalidStreamKeyError` if invalid."""
    raw = key.encode("utf-8")
    if not key_is_valid(raw):
        raise InvalidStreamKeyError(
            f"invalid stream key {key!r}: at most {MAX_STREAM_KEY_BYTES} characters "
            "from [A-Za-z0-9._-]"
        )
    return bytes((len(raw),)) + raw


class Header(NamedTuple):
    """The 128-byte file header."""

    file_name: str
    created_at_ms: int
    beacon_interval: int


def encode_header(header: Header) -> bytes:
    """The 128 header bytes: magic, version, file name, creation time, interval, padding, 0x0D."""
    name = header.file_name.encode("utf-8")
    if len(name) > MAX_FILE_NAME_BYTES:
        raise FileNameError(
            f"file name {header.file_name!r} is {len(name)} bytes; the header holds at most "
            f"{MAX_FILE_NAME_BYTES}"
        )
    if header.beacon_interval < MIN_BEACON_INTERVAL or header.beacon_interval >= 1 << 32:
        raise BeaconIntervalError(
            f"beacon interval {header.beacon_interval} outside {MIN_BEACON_INTERVAL}..2**32-1"
        )
    _check_timestamp(header.created_at_ms, None, 3)
    head = (
        MAGIC
        + bytes((VERSION, len(name)))
        + name
        + struct.pack(">QI", header.created_at_ms, header.beacon_interval)
    )
    return head + bytes(HEADER_SIZE - 1 - len(head)) + b"\r"


def is_header_prefix(data: bytes) -> bool:
    """Whether ``data`` (shorter than a header) is, byte by byte, the start of a header a writer
    could write: the magic, the version, a name length that fits and a name that can still be
    UTF-8, a timestamp and interval in range as far as they go, then zero padding. A file that
    holds only such bytes is a header write cut short: it holds no message."""
    n = len(data)
    if n >= HEADER_SIZE or data[: min(n, 2)] != MAGIC[: min(n, 2)]:
        return False
    if n > 2 and data[2] != VERSION:
        return False
    if n <= 3:
        return True
    name_len = data[3]
    if name_len > MAX_FILE_NAME_BYTES:
        return False
    name_end = 4 + name_len
    try:
        codecs.getincrementaldecoder("utf-8")().decode(bytes(data[4:name_end]), final=n >= name_end)
    except UnicodeDecodeError:
        return False
    if n >= name_end + 8:
        (created_at,) = struct.unpack_from(">Q", data, name_end)
        if created_at > MAX_TIMESTAMP_MS:
            return False
    elif n > name_end and data[name_end] != 0:
        return False  # a timestamp before the year 10000 starts with a zero byte
    if n >= name_end + 12:
        (interval,) = struct.unpack_from(">I", data, name_end + 8)
        if interval < MIN_BEACON_INTERVAL:
            return False
    return not any(data[name_end + 12 :])


def decode_header(data: bytes, path: str | None = None) -> Header:
    """Parse the header at the start of ``data`` (which must hold at least 128 bytes)."""
    if len(data) < HEADER_SIZE:
        if data[:2] != MAGIC[: len(data)]:
            raise BadMagicError(f"not a stream file: starts with {bytes(data[:2])!r}", path=path)
        raise TruncatedError(
            f"file ends inside the {HEADER_SIZE}-byte header", path=path, offset=len(data)
        )
    if data[:2] != MAGIC:
        raise BadMagicError(
            f"not a stream file: starts with {bytes(data[:2])!r}, expected {MAGIC!r}",
            path=path,
            offset=0,
        )
    if data[2] != VERSION:
        raise UnsupportedVersionError(
            f"format version {data[2]} is not supported (only {VERSION})", path=path, offset=2
        )
    name_len = data[3]
    if name_len > MAX_FILE_NAME_BYTES:
        raise FileNameError(
            f"file name length {name_len} leaves no room in the header", path=path, offset=3
        )
    try:
        name = bytes(data[4 : 4 + name_len]).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FileNameError(f"file name is not valid UTF-8 ({exc})", path=path, offset=4) from None
    created_at, interval = struct.unpack_from(">QI", data, 4 + name_len)
    _check_timestamp(created_at, path, 4 + name_len)
    if interval < MIN_BEACON_INTERVAL:
        raise BeaconIntervalError(
            f"beacon interval {interval} is below the minimum {MIN_BEACON_INTERVAL}",
            path=path,
            offset=12 + name_len,
        )
    return Header(name, created_at, interval)


def _check_timestamp(value: int, path: str | None, offset: int | None) -> None:
    if value < 0:
        raise TimestampRangeError(f"timestamp {value} ms is before 1970", path=path, offset=offset)
    if value > MAX_TIMESTAMP_MS:
        raise TimestampRangeError(
            f"timestamp {value} ms lies after the year 9999 (max {MAX_TIMESTAMP_MS})",
            path=path,
            offset=offset,
        )


class Message(NamedTuple):
    """One decoded message and the file offset of its frame."""

    stream_key: str
    shard: int
    seq: int
    timestamp_ms: int
    payload: bytes
    offset: int

    @property
    def is_eos(self) -> bool:
        """Whether this is the end-of-stream marker (internal key, payload ``EOS``)."""
        return self.stream_key == INTERNAL_KEY and self.payload == EOS_PAYLOAD


def encode_frame(key: bytes, shard: int, seq: int, timestamp_ms: int, payload: bytes) -> bytes:
    """One message frame. ``key`` is the ShortString from :func:`encode_key`."""
    return b"".join(
        (
            key,
            FRAME_FIXED.pack(shard, seq, timestamp_ms, len(payload)),
            payload,
            _CRC_TAIL.pack(crc16(payload), 13),
        )
    )


class Marker(NamedTuple):
    """A beacon's summary of one stream: highest seq and timestamp so far, running checksum."""

    stream_key: str
    shard: int
    seq: int
    timestamp_ms: int
    running_checksum: int


class Beacon(NamedTuple):
    """The record at every multiple of the interval; ``remaining`` bytes of a split frame follow."""

    remaining: int
    markers: tuple[Marker, ...]


def max_markers(space: int) -> int:
    """How many of the largest possible markers fit in ``space`` bytes (at most 255)."""
    return 0 if space < 7 else min(255, (space - 7) // _LARGEST_MARKER)


def markers_per_beacon(beacon_interval: int) -> int:
    """How many markers the writer puts in each beacon for this interval (upstream rule)."""
    return max_markers(beacon_interval) // 2


def encode_beacon(remaining: int, markers: list[tuple[bytes, int, int, int, int]]) -> bytes:
    """A beacon; each marker is (ShortString key, shard, seq, timestamp ms, running checksum)."""
    parts = [_BEACON_HEAD.pack(13, remaining, len(markers))]
    for key, shard, seq, ts, checksum in markers:
        parts.append(key)
        parts.append(_MARKER_FIXED.pack(shard, seq, ts, checksum))
    parts.append(b"\r")
    return b"".join(parts)


def decode_beacon(
    data: bytes, pos: int, offset: int, path: str | None
) -> tuple[Beacon, int] | None:
    """Parse the beacon at ``data[pos:]`` (file offset ``offset``); None when its bytes are short.

    Returns the beacon and its size in bytes.
    """
    end = len(data)
    if pos + 6 > end:
        return None
    first, remaining, count = _BEACON_HEAD.unpack_from(data, pos)
    if first != 13:
        raise BeaconError(
            f"beacon starts with byte {first:#04x}, not 0x0d", path=path, offset=offset
        )
    p = pos + 6
    markers = []
    for _ in range(count):
        if p >= end:
            return None
        klen = data[p]
        if p + 1 + klen + 26 > end:
            return None
        raw = bytes(data[p + 1 : p + 1 + klen])
        if not key_is_valid(raw):
            raise InvalidStreamKeyError(
                f"beacon marker has invalid stream key {raw!r}", path=path, offset=offset + p - pos
            )
        shard, seq, ts, checksum = _MARKER_FIXED.unpack_from(data, p + 1 + klen)
        _check_timestamp(ts, path, offset + p - pos)
        markers.append(Marker(raw.decode("ascii"), shard, seq, ts, checksum))
        p += 1 + klen + 26
    if p >= end:
        return None
    if data[p] != 13:
        raise BeaconError(
            f"beacon ends with byte {data[p]:#04x}, not 0x0d", path=path, offset=offset + p - pos
        )
    return Beacon(remaining, tuple(markers)), p + 1 - pos
