"""The list / Pub/Sub frame: ``[u32 count]([u32 len][name][u32 len][value])*`` then the payload."""

from __future__ import annotations

import struct

from hypothesis import given
from hypothesis import strategies as st

from trio_streams.redis.frames import decode_frame, encode_frame


def test_a_frame_is_the_header_count_each_header_with_lengths_then_the_payload() -> None:
    frame = encode_frame(b"body", {"a": "1", "bc": "é"})
    assert frame == (
        struct.pack(">I", 2)
        + struct.pack(">I", 1) + b"a" + struct.pack(">I", 1) + b"1"
        + struct.pack(">I", 2) + b"bc" + struct.pack(">I", 2) + "é".encode()
        + b"body"
    )  # fmt: skip
    assert decode_frame(frame) == (b"body", {"a": "1", "bc": "é"})


def test_a_message_without_headers_is_framed_with_a_zero_count() -> None:
    assert encode_frame(b"\x00\x00\x00\x01x", {}) == b"\x00\x00\x00\x00\x00\x00\x00\x01x"
    assert decode_frame(b"\x00\x00\x00\x00\x00\x00\x00\x01x") == (b"\x00\x00\x00\x01x", {})


def test_a_value_that_is_not_a_valid_frame_is_a_headerless_payload() -> None:
    for value in (
        b"",
        b"abc",
        b'{"id": 1}',  # another producer's plain value
        struct.pack(">I", 1) + struct.pack(">I", 50) + b"short",  # a name past the end
        struct.pack(">I", 1) + struct.pack(">I", 1) + b"a",  # no value length
        struct.pack(">I", 1) + struct.pack(">I", 1) + b"\xff" + struct.pack(">I", 0),  # not UTF-8
        struct.pack(">I", 10**6) + b"x" * 100,  # more headers than bytes
    ):
        assert decode_frame(value) == (value, {}), value


@given(
    payload=st.binary(max_size=200),
    headers=st.dictionaries(st.text(max_size=20), st.text(max_size=40), max_size=6),
)
def test_every_message_survives_its_frame(payload: bytes, headers: dict[str, str]) -> None:
    assert decode_frame(encode_frame(payload, headers)) == (payload, headers)


@given(st.binary(max_size=300))
def test_any_bytes_decode_without_an_error(value: bytes) -> None:
    payload, headers = decode_frame(value)
    assert isinstance(payload, bytes) and isinstance(headers, dict)
