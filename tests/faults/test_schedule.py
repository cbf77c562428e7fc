"""Seeded schedules: the same seed gives the same sequence of faults."""

from __future__ import annotations

import pytest
import trio

from trio_streams.redis.client import RedisError, connect
from trio_streams.testing.faults import FAULT_KINDS, FaultProxy, FaultSchedule


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
