"""The codec against FORMAT.md's tables and worked example, and each header error."""

from __future__ import annotations

import pytest

from trio_streams.file.errors import (
    BadMagicError,
    BeaconIntervalError,
    FileNameError,
    InvalidStreamKeyError,
    TruncatedError,
    UnsupportedVersionError,
)
from trio_streams.file.format import (
    Header,
    crc16,
    decode_beacon,
    decode_header,
    encode_beacon,
    encode_frame,
    encode_header,
    encode_key,
    markers_per_beacon,
    running_checksum,
)


@pytest.mark.parametrize(
    ("data", "crc"),
    [
        (b"123456789", 0x4C06),
        (b"hello, world", 0x8028),
        (b"123456789abcd", 0xA106),
        (b"hello-0", 0xF556),
        (b"hi", 0xD73B),
        (b"EOS", 0xED7C),
        (b"", 0xFFFF),
    ],
)
def test_crc16_cdma2000(data: bytes, crc: int) -> None:
    assert crc16(data) == crc


def test_running_checksum_feeds_big_endian_payload_crcs() -> None:
    assert running_checksum(0xFFFF, b"\xf5\x56") == 0xE2C1


def test_worked_example_bytes() -> None:
    header = encode_header(Header("t.ss", 1_700_000_000_000, 1024))
    frame = encode_frame(encode_key("k"), 0, 1, 1_700_000_000_001, b"hi")
    assert len(header) == 128
    assert header[
        :0x18
    ].hex() == "5373 0104 742e 7373 0000 018b cfe5 6800 0000 0400 0000 0000".replace(" ", "")
    assert header[127] == 0x0D
    assert set(header[0x14:127]) == {0}
    assert frame.hex() == (
        "016b" + "0000000000000000" + "0000000000000001" + "0000018bcfe56801" + "00000002"
        "6869" + "d73b" + "0d"
    )
    assert decode_header(header) == Header("t.ss", 1_700_000_000_000, 1024)


def test_frame_sizes() -> None:
    assert len(encode_frame(encode_key(""), 0, 0, 0, b"")) == 32
    assert len(encode_frame(encode_key("hello"), 0, 0, 0, b"hello-0")) == 44
    assert len(encode_frame(encode_key("SEA_STREAMER_INTERNAL"), 0, 0, 0, b"EOS")) == 56


@pytest.mark.parametrize(
    ("interval", "markers"),
    [(128, 0), (570, 0), (571, 1), (1024, 1), (2048, 3), (4096, 7), (8192, 14), (65536, 116),
     (1 << 20, 127)],
)  # fmt: skip
def test_markers_per_beacon(interval: int, markers: int) -> None:
    assert markers_per_beacon(interval) == markers


def test_beacon_round_trip_and_sizes() -> None:
    empty = encode_beacon(0, [])
    assert len(empty) == 7
    one = encode_beacon(5, [(encode_key("hello"), 0, 3, 4, 0xE2C1)])
    assert len(one) == 39
    beacon, size = decode_beacon(one, 0, 1024, None) or pytest.fail("short")
    assert size == 39
    assert beacon.remaining == 5
    assert beacon.markers[0][:] == ("hello", 0, 3, 4, 0xE2C1)
    assert decode_beacon(one[:-1], 0, 1024, None) is None


def _header(**changes: int) -> bytearray:
    data = bytearray(encode_header(Header("t.ss", 1, 1024)))
    for index, value in changes.items():
        data[int(index[1:])] = value
    return data


def test_header_errors_name_the_offset() -> None:
    with pytest.raises(BadMagicError) as bad_magic:
        decode_header(bytes(_header(b0=ord("X"))), "f.ss")
    assert "f.ss at byte 0" in str(bad_magic.value)
    with pytest.raises(UnsupportedVersionError) as version:
        decode_header(bytes(_header(b2=2)), "f.ss")
    assert version.value.offset == 2
    with pytest.raises(BeaconIntervalError) as interval:
        decode_header(bytes(_header(b18=0, b19=127)), "f.ss")
    assert interval.value.offset == 16
    with pytest.raises(FileNameError):
        decode_header(bytes(_header(b4=0xFF)), "f.ss")
    with pytest.raises(TruncatedError):
        decode_header(bytes(_header())[:100], "f.ss")
    with pytest.raises(FileNameError):
        encode_header(Header("x" * 112, 1, 1024))
    with pytest.raises(BeaconIntervalError):
        encode_header(Header("x", 1, 127))


@pytest.mark.parametrize("key", ["a b", "ü", "x" * 250, "a/b"])
def test_invalid_keys_are_refused(key: str) -> None:
    with pytest.raises(InvalidStreamKeyError):
        encode_key(key)


def test_valid_keys() -> None:
    assert encode_key("") == b"\x00"
    assert encode_key("a.B-c_9") == b"\x07a.B-c_9"
    assert len(encode_key("x" * 249)) == 250
