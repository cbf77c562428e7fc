import datetime as dt

import pytest

from trio_streams import InvalidPosition, Position
from trio_streams.core.positions import MAX_SEQUENCE, MAX_TIMESTAMP_MS, PositionKind


def test_position_kinds() -> None:
    assert Position.beginning().kind is PositionKind.BEGINNING
    assert Position.end().kind is PositionKind.END
    assert Position.sequence(5) == Position(PositionKind.SEQUENCE, 5)
    assert Position.timestamp(7, stream="s") == Position(PositionKind.TIMESTAMP, 7, "s")


@pytest.mark.parametrize("bad", [-1, MAX_SEQUENCE + 1])
def test_an_out_of_range_sequence_is_refused_before_any_client_sees_it(bad: int) -> None:
    with pytest.raises(InvalidPosition, match="outside"):
        Position.sequence(bad)


@pytest.mark.parametrize("bad", [-1, MAX_TIMESTAMP_MS + 1])
def test_an_out_of_range_timestamp_is_refused(bad: int) -> None:
    with pytest.raises(InvalidPosition, match="outside"):
        Position.timestamp(bad)


@pytest.mark.parametrize("bad", [1.5, "3", True, None])
def test_positions_take_whole_numbers_only(bad: object) -> None:
    with pytest.raises(InvalidPosition, match="takes an int"):
        Position.timestamp(bad)  # type: ignore[arg-type]


def test_datetimes_convert_to_milliseconds_without_loss() -> None:
    instant = dt.datetime(2024, 5, 6, 7, 8, 9, 123_000, tzinfo=dt.UTC)
    assert Position.after(instant) == Position.timestamp(1_714_979_289_123)
    late = dt.datetime(9999, 12, 31, 23, 59, 59, 999_000, tzinfo=dt.UTC)
    assert Position.after(late).value == MAX_TIMESTAMP_MS


def test_sub_millisecond_or_naive_datetimes_are_refused() -> None:
    with pytest.raises(InvalidPosition, match="sub-millisecond"):
        Position.after(dt.datetime(2024, 1, 1, microsecond=1, tzinfo=dt.UTC))
    with pytest.raises(InvalidPosition, match="naive"):
        Position.after(dt.datetime(2024, 1, 1))


def test_for_stream_binds_only_unbound_sequence_and_timestamp_positions() -> None:
    assert Position.sequence(3).for_stream("a") == Position.sequence(3, stream="a")
    assert Position.sequence(3, stream="b").for_stream("a").stream == "b"
    assert Position.end().for_stream("a") == Position.end()
    assert repr(Position.sequence(3, stream="a")) == "Position.sequence(3, stream='a')"


# ---- Positions that fit Redis: "A Redis stream position is an entry id (<ms>-<seq>), not an int."


def test_an_entry_id_position_round_trips_and_orders_as_redis_orders_ids() -> None:
    first = Position.entry("1526985054069-0", stream="orders")
    later = Position.entry("1526985054069-12")
    latest = Position.entry("1526985054070-0")
    assert first.entry_id == "1526985054069-0" and later.entry_id == "1526985054069-12"
    assert first.value is not None and later.value is not None and latest.value is not None
    assert first.value < later.value < latest.value
    assert repr(first) == "Position.entry('1526985054069-0', stream='orders')"
    assert first.describe() == "entry:1526985054069-0"
    top = Position.entry(f"{MAX_SEQUENCE}-{MAX_SEQUENCE}")
    assert top.entry_id == f"{MAX_SEQUENCE}-{MAX_SEQUENCE}"


@pytest.mark.parametrize(
    "bad",
    ["", "123", "1-", "-1", "a-1", "1-2-3", " 1-2", f"{MAX_SEQUENCE + 1}-0", "\u0661-\u0662", 5],
)
def test_an_entry_id_that_is_not_ms_dash_seq_is_refused(bad: object) -> None:
    with pytest.raises(InvalidPosition):
        Position.entry(bad)  # type: ignore[arg-type]


def test_describe_names_every_kind() -> None:
    assert Position.sequence(57, stream="s").describe() == "sequence:57"
    assert Position.sequence(57, shard=1).describe() == "sequence:57@1"
    assert Position.timestamp(5).describe() == "timestamp:5"
    assert Position.beginning().describe() == "beginning"
    assert Position.end().describe() == "end"
    with pytest.raises(ValueError, match="not a Redis stream entry"):
        _ = Position.sequence(1).entry_id


def test_seq_is_the_number_of_a_sequence_position_and_refused_for_others() -> None:
    assert Position.sequence(57, stream="s").seq == 57
    for other in (Position.beginning(), Position.end(), Position.timestamp(5)):
        with pytest.raises(ValueError, match="not a sequence position"):
            _ = other.seq


@pytest.mark.parametrize(
    ("kind", "value", "stream"),
    [
        (PositionKind.SEQUENCE, None, None),
        (PositionKind.SEQUENCE, "5", None),
        (PositionKind.SEQUENCE, -1, None),
        (PositionKind.SEQUENCE, 2**64, None),
        (PositionKind.SEQUENCE, True, None),
        (PositionKind.SEQUENCE, 1.0, None),
        (PositionKind.TIMESTAMP, -5, None),
        (PositionKind.TIMESTAMP, None, None),
        (PositionKind.BEGINNING, 3, None),
        (PositionKind.END, None, "s"),
        (PositionKind.SEQUENCE, 1, ""),
        (PositionKind.SEQUENCE, 1, 7),
        ("sequence", 1, None),
    ],
)
def test_the_raw_constructor_validates_like_the_named_ones(
    kind: object, value: object, stream: object
) -> None:
    with pytest.raises(InvalidPosition):
        Position(kind, value, stream)  # type: ignore[arg-type]


@pytest.mark.parametrize("shard", [-1, 2**64, "1", 1.5])
def test_a_shard_outside_u64_is_refused(shard: object) -> None:
    with pytest.raises(InvalidPosition):
        Position.sequence(1, shard=shard)  # type: ignore[arg-type]
