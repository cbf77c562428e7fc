"""The rs1:/rs2: header envelope, with vectors built by hand from the wire-format description.

"A payload without headers is written verbatim ...; with headers (or a payload that itself
begins with rs1: or rs2:), the prefix, then standard padded base64 of [u32 BE block length]
[block][payload]. rs1: when every header name is UTF-8 without ':', and every name and value is
UTF-8 without \\r/\\n and without leading or trailing whitespace — the block is 'name: value\\n'
per header; otherwise rs2: with the block ([u32 BE name length][name][u32 BE value length]
[value])*. A reader treats anything that is not a well-formed envelope (bad base64, short,
malformed block) as a headerless payload."
"""

from __future__ import annotations

import base64
import struct

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trio_streams.file.envelope import EnvelopeError, open_envelope, seal

#: (payload, headers, the bytes written). The first was worked out by hand:
#: 00000005 'a: 1\n' 'hello' -> AAAA BWE6 IDEK aGVs bG8=
VECTORS: list[tuple[bytes, dict[str, str], bytes]] = [
    (b"hello", {}, b"hello"),
    (b"", {}, b""),
    (b"rs", {}, b"rs"),
    (b"hello", {"a": "1"}, b"rs1:AAAABWE6IDEKaGVsbG8="),
    # A headerless payload that would be mistaken for an envelope is enveloped, with no headers.
    (b"rs1:x", {}, b"rs1:AAAAAHJzMTp4"),
    (b"rs2:", {}, b"rs1:AAAAAHJzMjo="),
    (
        b"{}",
        {"content-type": "application/json", "x-ruststream-retry-count": "2"},
        b"rs1:AAAAO2NvbnRlbnQtdHlwZTogYXBwbGljYXRpb24vanNvbgp4LXJ1c3RzdHJlYW0tcmV0cnktY291bnQ6IDIKe30=",
    ),
    # UTF-8 names and values are fine in rs1; the payload stays binary.
    (b"\x00\xff", {"café": "über"}, b"rs1:AAAADWNhZsOpOiDDvGJlcgoA/w=="),
    # A name with ':' needs rs2: 00000003 'a:b' 00000001 'c'.
    (b"p", {"a:b": "c"}, b"rs2:AAAADAAAAANhOmIAAAABY3A="),
    # Leading/trailing whitespace in a value needs rs2.
    (b"", {"k": " v "}, b"rs2:AAAADAAAAAFrAAAAAyB2IA=="),
]


@pytest.mark.parametrize(("payload", "headers", "written"), VECTORS)
def test_vectors_seal_and_open(payload: bytes, headers: dict[str, str], written: bytes) -> None:
    assert seal(payload, headers) == written
    opened, got = open_envelope(written)
    assert opened == payload
    assert dict(got) == headers


def test_the_envelope_layout_is_prefix_then_base64_of_length_block_payload() -> None:
    sealed = seal(b"PAYLOAD", {"x": "y", "z": "w"})
    assert sealed[:4] == b"rs1:"
    raw = base64.b64decode(sealed[4:], validate=True)
    (length,) = struct.unpack_from(">I", raw)
    assert raw[4 : 4 + length] == b"x: y\nz: w\n"
    assert raw[4 + length :] == b"PAYLOAD"


@pytest.mark.parametrize(
    "headers",
    [
        {"a:b": "c"},  # ':' in a name
        {"a": "line\nbreak"},
        {"a": "carriage\rreturn"},
        {"a\nb": "c"},
        {" a": "c"},  # leading whitespace in a name
        {"a": "c\t"},  # trailing whitespace in a value
        {"a": "\u3000c"},  # ideographic space: Unicode White_Space
        {"a": "c\x85"},  # NEL: White_Space too
        {"ok": "fine", "bad:": "one is enough"},
    ],
)
def test_headers_that_rs1_cannot_hold_are_written_as_rs2(headers: dict[str, str]) -> None:
    sealed = seal(b"m", headers)
    assert sealed.startswith(b"rs2:")
    assert open_envelope(sealed) == (b"m", headers)


@pytest.mark.parametrize(
    "headers",
    [{"a": ""}, {"": "v"}, {"a": "x: y"}, {"a": "c\x1f"}, {"a": "in side"}],
)
def test_rs1_holds_empty_values_colons_in_values_and_inner_spaces(
    headers: dict[str, str],
) -> None:
    sealed = seal(b"m", headers)
    assert sealed.startswith(b"rs1:")
    assert open_envelope(sealed) == (b"m", headers)


def test_a_header_that_is_not_utf8_is_a_clear_error() -> None:
    with pytest.raises(EnvelopeError, match=r"header 'bad': the value is not encodable as UTF-8"):
        seal(b"m", {"bad": "\udcff"})


def _envelope(prefix: bytes, raw: bytes) -> bytes:
    return prefix + base64.b64encode(raw)


@pytest.mark.parametrize(
    "data",
    [
        b"rs1:",  # nothing after the prefix
        b"rs1:!!!!",  # not base64
        b"rs1:AAAABWE6IDEKaGVsbG8",  # unpadded
        b"rs1:AAAABWE6IDEKaGVsbG8=AAAA",  # data after the padding
        b"rs1:AAAA",  # decodes to 3 bytes: shorter than the length field
        _envelope(b"rs1:", struct.pack(">I", 9) + b"a: 1\n"),  # block longer than what follows
        _envelope(b"rs1:", struct.pack(">I", 4) + b"a: 1"),  # no newline at the end
        _envelope(b"rs1:", struct.pack(">I", 4) + b"a=1\n"),  # no ':'
        _envelope(b"rs1:", struct.pack(">I", 4) + b"a:1\n"),  # no space after ':'
        _envelope(b"rs1:", struct.pack(">I", 6) + b"a: 1\r\n"),  # carriage return
        _envelope(b"rs1:", struct.pack(">I", 5) + b"a: \xff\n"),  # not UTF-8
        _envelope(b"rs2:", struct.pack(">I", 3) + b"\x00\x00\x00"),  # cut length field
        _envelope(b"rs2:", struct.pack(">I", 5) + struct.pack(">I", 1) + b"a"),  # no value
        _envelope(
            b"rs2:", struct.pack(">I", 9) + struct.pack(">I", 1) + b"a" + struct.pack(">I", 1)
        ),
        _envelope(
            b"rs2:",
            struct.pack(">I", 10) + struct.pack(">I", 1) + b"\xff" + struct.pack(">I", 1) + b"v",
        ),
    ],
)
def test_anything_not_a_well_formed_envelope_is_a_headerless_payload(data: bytes) -> None:
    payload, headers = open_envelope(data)
    assert payload == data
    assert headers == {}


@given(
    payload=st.binary(max_size=64) | st.sampled_from([b"rs1:", b"rs2:xyz", b"rs1:AAAA"]),
    headers=st.dictionaries(st.text(max_size=8), st.text(max_size=8), max_size=4),
)
def test_whatever_is_sealed_opens_to_what_went_in(payload: bytes, headers: dict[str, str]) -> None:
    sealed = seal(payload, headers)  # st.text() draws no lone surrogates: always UTF-8
    opened, got = open_envelope(sealed)
    assert opened == payload
    assert dict(got) == headers
