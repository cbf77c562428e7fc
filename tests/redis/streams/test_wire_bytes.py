"""Entries of other producers that hold bytes that are not UTF-8 (in field names, field values,
header values) deliver every byte: the payload is the entry's fields as JSON, with
``{"base64": ...}`` for what is not text, never a U+FFFD in its place."""

from __future__ import annotations

import json

import pytest

from trio_streams.record.fields import encode_field_list
from trio_streams.redis import ForeignPayloadError, entry_fields
from trio_streams.redis.wire import decode_fields

HIGH = bytes(range(0x80, 0x100))  # every byte that is never UTF-8 alone
REPLACEMENT = "\ufffd".encode()

FOREIGN = {
    "a value of every high byte": [b"name", b"text", b"blob", HIGH],
    "a field name with high bytes": [b"n\x80\xff", b"v", b"ok", b"yes"],
    "a high-byte name and value": [b"\xc3\x28", HIGH],
    "a header value that is not UTF-8": [b"_payload", b"p", b"h:trace", b"t\xff", b"h:ok", b"1"],
    "a header name that is not UTF-8": [b"_payload", b"\x00\xff", b"h:\xfe", b"v"],
    "a repeated field name": [b"f", b"\x80", b"f", b"2"],
}


@pytest.mark.parametrize("fields", FOREIGN.values(), ids=FOREIGN.keys())
def test_a_foreign_entry_delivers_every_byte_of_its_fields(fields: list[bytes]) -> None:
    payload, headers = decode_fields(fields)
    assert headers == {}
    assert REPLACEMENT not in payload
    assert entry_fields(payload) == fields


def test_a_binary_value_beside_text_names_keeps_the_object_a_dict_handler_takes() -> None:
    payload, _ = decode_fields([b"kind", b"click", b"blob", b"\x82\xa1a\x01\xff"])
    assert json.loads(payload) == {"kind": "click", "blob": {"base64": "gqFhAf8="}}


def test_a_text_value_that_looks_like_base64_markup_stays_a_string() -> None:
    payload, _ = decode_fields([b"k", b'{"base64":"AA=="}'])
    assert json.loads(payload) == {"k": '{"base64":"AA=="}'}
    assert entry_fields(payload) == [b"k", b'{"base64":"AA=="}']


def test_fields_the_object_cannot_hold_are_the_array_a_recording_keeps() -> None:
    fields = [b"n\x80\xff", b"v", b"caf\xc3\xa9", HIGH]
    payload, _ = decode_fields(fields)
    assert payload == encode_field_list(fields).encode()


def test_an_entry_in_the_layout_still_decodes_to_its_payload_and_utf8_headers() -> None:
    fields = [b"_payload", b"\x00\xff", b"h:caf\xc3\xa9", b"\xc3\xa9t\xc3\xa9"]
    assert decode_fields(fields) == (b"\x00\xff", {"café": "été"})


@pytest.mark.parametrize(
    "payload", [b"not json", b"3", b'["odd"]', b'{"k": 1}', b'[{"b": 1}, "x"]']
)
def test_entry_fields_refuses_a_payload_that_is_not_a_foreign_entrys(payload: bytes) -> None:
    with pytest.raises(ForeignPayloadError):
        entry_fields(payload)
