import math

import pytest

from trio_streams import ack, drop, retry, retry_after
from trio_streams.core.outcome import OutcomeKind


def test_outcomes_are_values_that_compare_equal() -> None:
    assert ack() == ack()
    assert [ack(), retry_after(60)] == [ack(), retry_after(60.0)]
    assert retry_after(60) != retry_after(61)
    assert drop() != ack()


def test_outcome_reprs_read_like_the_calls() -> None:
    assert repr(ack()) == "ack()"
    assert repr(drop()) == "drop()"
    assert repr(retry()) == "retry()"
    assert repr(retry_after(1.5)) == "retry_after(1.5)"


def test_retry_after_zero_is_a_plain_retry() -> None:
    assert retry_after(0) == retry()


@pytest.mark.parametrize("bad", [-1, math.inf, math.nan])
def test_retry_after_refuses_delays_that_cannot_be_waited(bad: float) -> None:
    with pytest.raises(ValueError, match="finite delay"):
        retry_after(bad)


@pytest.mark.parametrize("bad", ["5", None, True])
def test_retry_after_refuses_non_numbers(bad: object) -> None:
    with pytest.raises(TypeError, match="number of seconds"):
        retry_after(bad)  # type: ignore[arg-type]


def test_retry_outcomes_say_so() -> None:
    assert retry().is_retry and retry_after(3).is_retry
    assert not ack().is_retry and ack().consumes and drop().consumes
    assert retry_after(3).kind is OutcomeKind.RETRY_AFTER and retry_after(3).delay == 3.0
