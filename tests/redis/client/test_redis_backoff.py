"""Reconnect backoff: doubling, capped, jittered, reset by a success."""

from __future__ import annotations

import random

from trio_streams.redis.client import Backoff


def test_delays_double_up_to_the_cap_with_jitter() -> None:
    backoff = Backoff(0.1, 1.0, rng=random.Random(7))
    delays = [backoff.failed() for _ in range(8)]
    ceilings = [0.1, 0.2, 0.4, 0.8, 1.0, 1.0, 1.0, 1.0]
    for delay, ceiling in zip(delays, ceilings, strict=True):
        assert ceiling / 2 <= delay <= ceiling
    assert len(set(delays)) == len(delays)  # jittered: no two clients retry in lockstep


def test_success_resets_to_the_initial_delay() -> None:
    backoff = Backoff(0.1, 1.0)
    for _ in range(5):
        backoff.failed()
    backoff.succeeded()
    assert backoff.failures == 0
    assert backoff.failed() <= 0.1


def test_a_long_outage_does_not_overflow() -> None:
    backoff = Backoff(0.05, 2.0)
    for _ in range(10_000):
        delay = backoff.failed()
    assert 1.0 <= delay <= 2.0
