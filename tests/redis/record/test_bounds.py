"""``--from`` / ``--until``: entry ids inclusive, ``ts:MS`` as everywhere in trio-streams."""

from __future__ import annotations

import pytest

from trio_streams.core.errors import ConfigurationError
from trio_streams.core.positions import MAX_SEQUENCE
from trio_streams.record import BoundError, StreamBounds, parse_bounds
from trio_streams.record.pacing import Pacing


def test_no_bounds_is_the_whole_stream() -> None:
    assert parse_bounds(None, None) == StreamBounds("-", "+")


def test_an_entry_id_is_inclusive_at_both_ends() -> None:
    assert parse_bounds("5-1", "9-2") == StreamBounds("5-1", "9-2")


def test_a_bare_millisecond_covers_every_entry_of_it() -> None:
    assert parse_bounds("5", "9") == StreamBounds("5-0", f"9-{MAX_SEQUENCE}")


def test_from_ts_is_strictly_later_and_until_ts_is_at_or_before() -> None:
    assert parse_bounds("ts:5", "ts:9") == StreamBounds("6-0", f"9-{MAX_SEQUENCE}")


def test_from_end_records_only_new_entries() -> None:
    bounds = parse_bounds("end", None)
    assert bounds.from_end and bounds.start is None


@pytest.mark.parametrize(
    "text", ["x", "1-2-3", "ts:", "ts:-1", "-5", "1-", "99999999999999999999999"]
)
def test_a_bound_that_is_not_an_id_or_ts_is_refused_naming_it(text: str) -> None:
    with pytest.raises(BoundError, match="--from"):
        parse_bounds(text, None)


def test_until_end_is_refused() -> None:
    with pytest.raises(BoundError, match="--until 'end'"):
        parse_bounds(None, "end")


def test_from_after_until_is_refused() -> None:
    with pytest.raises(BoundError, match="comes after"):
        parse_bounds("9-0", "5-0")


def test_pacing_by_rate_spaces_messages_evenly() -> None:
    pacing = Pacing.per_second(4)
    assert [pacing.due(n, 0, 0) for n in range(3)] == [0.0, 0.25, 0.5]


def test_pacing_as_recorded_keeps_the_gaps_and_speed_divides_them() -> None:
    assert Pacing.as_recorded().due(5, 3500, 1000) == 2.5
    assert Pacing.as_recorded(2).due(5, 3500, 1000) == 1.25
    assert Pacing.as_recorded().due(1, 900, 1000) == 0.0  # an earlier clock: at once


@pytest.mark.parametrize("bad", [0, -1, float("inf"), float("nan")])
def test_pacing_refuses_a_rate_or_speed_that_is_not_positive(bad: float) -> None:
    with pytest.raises(ConfigurationError):
        Pacing.per_second(bad)
    with pytest.raises(ConfigurationError):
        Pacing.as_recorded(bad)
