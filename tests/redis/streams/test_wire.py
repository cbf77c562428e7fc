"""The stream transport's wire format and reply parsing, without a server."""

from __future__ import annotations

import pytest

from trio_streams import Position
from trio_streams.redis.wire import (
    Entry,
    ReplyShapeError,
    decode_fields,
    encode_fields,
    entry_position,
    id_before,
    parse_autoclaim,
    parse_pending,
    parse_read,
    stream_entries,
)


def test_a_message_is_payload_in_payload_and_each_header_in_h_name() -> None:
    fields = encode_fields(b"body", {"trace": "t1", "k": "v"})
    assert fields == [b"_payload", b"body", "h:trace", "t1", "h:k", "v"]
    wire = [f.encode() if isinstance(f, str) else f for f in fields]
    assert decode_fields(wire) == (b"body", {"trace": "t1", "k": "v"})


def test_other_fields_are_ignored_when_there_is_a_payload() -> None:
    assert decode_fields([b"x", b"1", b"_payload", b"p"]) == (b"p", {})


def test_an_entry_without_payload_delivers_its_fields_as_a_json_object() -> None:
    assert decode_fields([b"a", b"1", b"b", b"two"]) == (b'{"a":"1","b":"two"}', {})


def test_a_payload_alone_decodes_with_an_empty_headers_dict_of_its_own() -> None:
    first, second = decode_fields([b"_payload", b"p"]), decode_fields([b"_payload", b"p"])
    assert first == (b"p", {}) == second
    assert first[1] is not second[1]


def test_odd_fields_are_a_shape_error() -> None:
    with pytest.raises(ReplyShapeError, match="pairs"):
        decode_fields([b"_payload"])


def test_reads_parse_in_resp3_maps_and_resp2_lists_with_nil_fields_kept() -> None:
    entries = [[b"1-0", [b"_payload", b"x"]], [b"1-1", None]]
    expected = {"s": [Entry("1-0", [b"_payload", b"x"]), Entry("1-1", None)]}
    assert parse_read({b"s": entries}) == expected
    assert parse_read([[b"s", entries]]) == expected
    assert parse_read(None) == {}


def test_a_readers_own_stream_is_found_in_resp3_maps_and_resp2_lists_unparsed() -> None:
    entries = [[b"1-0", [b"_payload", b"x"]]]
    assert stream_entries({b"other": [], b"s": entries}, "s") is entries
    assert stream_entries([[b"s", entries]], "s") is entries
    assert stream_entries([[b"other", entries]], "s") is None
    assert stream_entries(None, "s") is None


@pytest.mark.parametrize("reply", [b"junk", [[b"s"]], [[b"s", b"not a list"]]])
def test_a_read_reply_of_another_shape_is_a_shape_error(reply: object) -> None:
    with pytest.raises(ReplyShapeError):
        stream_entries(reply, "s")


def test_xautoclaim_replies_with_and_without_the_deleted_ids_element() -> None:
    assert parse_autoclaim([b"0-0", [b"1-0"], [b"1-1"]]) == ("0-0", [b"1-0"], ["1-1"])
    assert parse_autoclaim([b"5-0", [b"1-0"]]) == ("5-0", [b"1-0"], [])


def test_xpending_gives_the_delivery_count_per_id() -> None:
    assert parse_pending([[b"1-0", b"c", 10, 3]]) == {"1-0": 3}


def test_the_id_before_an_entry_makes_a_start_inclusive() -> None:
    assert id_before("5-3") == "5-2"
    assert id_before("5-0") == f"4-{2**64 - 1}"
    assert id_before("0-0") == "0-0"


def test_an_entry_position_equals_position_entry_and_carries_its_time() -> None:
    position, ms = entry_position("1700000000000-7", "s")
    assert position == Position.entry("1700000000000-7", stream="s")
    assert ms == 1700000000000
