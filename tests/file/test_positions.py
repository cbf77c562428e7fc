"""Stream files seek with the core Position: one type, so handlers seek the same way in tests."""

from __future__ import annotations

import pytest

from trio_streams import InvalidPosition, Position
from trio_streams.file import FilePosition
from trio_streams.file.positions import format_position, parse_position


def test_file_positions_are_core_positions() -> None:
    assert FilePosition.sequence(5) == Position.sequence(5)
    assert FilePosition.timestamp(7, stream="k") == Position.timestamp(7, stream="k")
    assert FilePosition.beginning() is Position.beginning()
    assert FilePosition.end() is Position.end()


@pytest.mark.parametrize("text", ["beginning", "end", "seq:0", "seq:42", "ts:1700000000000"])
def test_parse_and_format_round_trip(text: str) -> None:
    assert format_position(parse_position(text)) == text


@pytest.mark.parametrize("text", ["", "start", "seq:", "seq:-1", "seq:x", "offset:5", "ts:1.5"])
def test_parse_refuses_what_it_cannot_read(text: str) -> None:
    with pytest.raises(ValueError, match="is not beginning, end, seq:N or ts:MS"):
        parse_position(text)


def test_out_of_range_values_are_refused_when_parsed() -> None:
    with pytest.raises(InvalidPosition, match="outside"):
        parse_position(f"seq:{2**64}")
    with pytest.raises(InvalidPosition, match="outside"):
        parse_position("ts:253402300800000")
