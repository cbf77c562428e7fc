"""Seeded schedules: the same seed gives the same sequence of faults."""

from __future__ import annotations

import math

import pytest
import trio

from trio_streams.redis.client import RedisError, connect
from trio_streams.testing.faults import FAULT_KINDS, FaultProxy, FaultSchedule
from trio_streams.testing.faults.plan import MAX_SCHEDULE_STEPS


def test_the_same_seed_gives_the_same_sequence_of_faults() -> None:
    first = FaultSchedule(seed=42, every=0.1, duration=5).plan()
    assert FaultSchedule(seed=42, every=0.1, duration=5).plan() == first
    assert FaultSchedule(seed=43, every=0.1, duration=5).plan() != first
    assert len(first) == 50
    assert {step.kind for step in first} == set(FAULT_KINDS)  # every kind, in 50 draws


def test_a_schedule_draws_only_the_kinds_it_is_given() -> None:
    plan = FaultSchedule(seed=1, every=0.1, duration=3, kinds=("cut", "delay")).plan()
    assert {step.kind for step in plan} == {"cut", "delay"}
    assert [step.at for step in plan] == pytest.approx([0.1 * i for i in range(1, 31)])


def test_a_schedule_refuses_unknown_kinds_and_bad_times() -> None:
    with pytest.raises(ValueError, match="kinds must be some of"):
        FaultSchedule(kinds=("explode",))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="every must be > 0"):
        FaultSchedule(every=0)


async def test_run_schedule_applies_the_plan_in_order_and_heals_each_fault(
    proxy: FaultProxy,
) -> None:
    schedule = FaultSchedule(seed=5, every=0.05, duration=1, hold=0.02)
    async with trio.open_nursery() as nursery:

        async def traffic() -> None:
            while True:  # each round trip is a checkpoint; failures are the point
                async with connect(f"{proxy.url}?connect_timeout=0.2&command_timeout=0.2") as r:
                    try:
                        await r.execute("INCR", "n")
                    except RedisError:
                        pass

        nursery.start_soon(traffic)
        with trio.fail_after(10):
            await proxy.run_schedule(schedule)
        nursery.cancel_scope.cancel()
    assert proxy.applied == schedule.plan()
    assert proxy.faults == []  # every standing fault healed
    assert sum(proxy.injected.values()) > 0
    assert set(proxy.injected) <= set(FAULT_KINDS)


@pytest.mark.parametrize(
    ("fields", "name"),
    [
        ({"every": math.nan}, "every"),
        ({"every": math.inf}, "every"),
        ({"duration": math.nan}, "duration"),
        ({"duration": math.inf}, "duration"),
        ({"duration": -1}, "duration"),
        ({"hold": -1}, "hold"),
        ({"hold": math.nan}, "hold"),
        ({"hold": math.inf}, "hold"),
    ],
)
def test_a_schedules_times_are_checked_at_construction_so_plan_never_fails(
    fields: dict[str, float], name: str
) -> None:
    with pytest.raises(ValueError, match=f"{name}="):
        FaultSchedule(**fields)  # type: ignore[arg-type]


def test_a_schedules_times_that_are_not_numbers_are_a_type_error_naming_them() -> None:
    with pytest.raises(TypeError, match="every is a number of seconds, not '1'"):
        FaultSchedule(every="1")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="hold"):
        FaultSchedule(hold=True)


def test_a_schedule_of_more_steps_than_the_bound_is_refused_naming_it() -> None:
    with pytest.raises(ValueError, match="MAX_SCHEDULE_STEPS"):
        FaultSchedule(every=1e-9, duration=1000)
    at_bound = FaultSchedule(every=1, duration=MAX_SCHEDULE_STEPS)
    assert at_bound.every == 1  # the bound itself is allowed (not planned here: a million)


@pytest.mark.parametrize("seed", [None, "x", 1.5, True])
def test_a_seed_that_is_not_an_int_is_refused_since_it_would_not_repeat_its_plan(
    seed: object,
) -> None:
    with pytest.raises(TypeError, match="seed is an int"):
        FaultSchedule(seed=seed)  # type: ignore[arg-type]
