"""Entries of other producers round-trip exactly: every field, byte for byte, in order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trio_streams.file.envelope import seal
from trio_streams.file.writer import StreamWriter
from trio_streams.record import record_stream, replay_file
from trio_streams.record.fields import BadFieldList, decode_field_list, encode_field_list
from trio_streams.record.replayer import ReplayError
from trio_streams.redis.client import RedisClient
from trio_streams.redis.wire import decode_fields

from .support import raw_entries, recorded

FOREIGN_ENTRIES = {
    "binary field values": [b"data", b"\x82\xa1a\x01\xff", b"name", b"text"],
    "a repeated field name": [b"f", b"1", b"f", b"2"],
    "plain fields next to _payload": [b"_payload", b"p", b"h:a", b"1", b"correlation_id", b"c1"],
    "a binary header value": [b"_payload", b"p", b"h:bin", b"\xff\xfe"],
    "a binary field name": [b"\xc3\x28", b"v"],
    "_payload given twice": [b"_payload", b"a", b"_payload", b"b"],
    "a field that looks like base64 markup": [b"k", b'{"base64":"AA=="}'],
}


async def _round_trip(redis: RedisClient, tmp_path: Path, fields: list[bytes]) -> list[bytes]:
    await redis.execute("XADD", "src", "1-0", *fields)
    with StreamWriter(tmp_path / "r.ss") as writer:
        await record_stream(redis, "src", writer)
    await replay_file(tmp_path / "r.ss", redis, rename="copy")
    [(_, copied)] = await raw_entries(redis, "copy")
    return copied


@pytest.mark.parametrize("fields", FOREIGN_ENTRIES.values(), ids=FOREIGN_ENTRIES.keys())
async def test_an_entry_of_another_producer_is_replayed_with_exactly_its_fields(
    redis: RedisClient, tmp_path: Path, fields: list[bytes]
) -> None:
    assert await _round_trip(redis, tmp_path, fields) == fields


async def test_the_recording_keeps_what_a_handler_reading_redis_sees_as_payload_and_headers(
    redis: RedisClient, tmp_path: Path
) -> None:
    fields = [b"_payload", b"p", b"h:a", b"1", b"h:bin", b"\xff", b"extra", b"x"]
    await _round_trip(redis, tmp_path, fields)
    [(_, _, _, payload, headers)] = recorded(tmp_path / "r.ss")
    from_redis_payload, from_redis_headers = decode_fields(fields)
    assert payload == from_redis_payload
    assert headers.pop("x-redis-id") == "1-0"
    assert decode_field_list(headers.pop("x-redis-fields")) == fields
    assert headers == from_redis_headers


async def test_a_trio_streams_entry_carries_no_field_list(
    redis: RedisClient, tmp_path: Path
) -> None:
    fields = [b"_payload", b"\x00\xff", b"h:a", b"1", b"h:b", b"x\ny"]
    assert await _round_trip(redis, tmp_path, fields) == fields
    [(_, _, _, _, headers)] = recorded(tmp_path / "r.ss")
    assert "x-redis-fields" not in headers


async def test_a_text_entry_without_payload_keeps_the_json_object_form(
    redis: RedisClient, tmp_path: Path
) -> None:
    fields = [b"b", b"2", b"a", b"1", b"z", b""]
    assert await _round_trip(redis, tmp_path, fields) == fields
    [(_, _, _, payload, headers)] = recorded(tmp_path / "r.ss")
    assert json.loads(payload) == {"b": "2", "a": "1", "z": ""}
    assert headers["x-redis-fields"] == "json"


def test_the_field_list_is_json_with_base64_only_for_bytes_that_are_not_utf8() -> None:
    value = encode_field_list([b"name", b"caf\xc3\xa9", b"bin", b"\xff"])
    assert json.loads(value) == ["name", "café", "bin", {"base64": "/w=="}]
    assert decode_field_list(value) == [b"name", b"caf\xc3\xa9", b"bin", b"\xff"]


@pytest.mark.parametrize(
    "value", ["", "[", "{}", "[]", '["odd"]', '["a", 1]', '["a", {"base64": "!!"}]']
)
def test_a_field_list_that_cannot_be_read_back_is_refused(value: str) -> None:
    with pytest.raises(BadFieldList):
        decode_field_list(value)


async def test_a_replay_of_a_damaged_field_list_names_the_message(
    redis: RedisClient, tmp_path: Path
) -> None:
    with StreamWriter(tmp_path / "bad.ss") as writer:
        writer.append("src", seal(b"p", {"x-redis-fields": '["odd"]'}), 1)
    with pytest.raises(ReplayError, match=r"message #1 of 'src'.*x-redis-fields"):
        await replay_file(tmp_path / "bad.ss", redis)
    assert await raw_entries(redis, "src") == []
