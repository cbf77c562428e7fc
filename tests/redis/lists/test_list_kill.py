"""kill -9 of a list consumer process mid-batch (``KillPoint.after_deliveries``): the reliable
list loses nothing, the simple list loses what the dead process had popped (measured,
printed)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.redis.client.redis_waits import eventually
from tests.redis.streams.procs import ROOT, Consumer
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import REDELIVERED_HEADER, decode_frame, encode_frame
from trio_streams.redis.lists import processing_key
from trio_streams.testing.faults import AppProcess, KillPoint

from .support import length

ENTRIES = 2000
MODULE = "tests.redis.lists.list_app"


async def _preload(redis: RedisClient) -> None:
    pipeline = redis.pipeline()
    for n in range(ENTRIES):
        pipeline.add("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    await pipeline.execute(raise_on_error=True)


def _handled(lines: list[str]) -> list[int]:
    return [int(line.split()[1]) for line in lines if line.startswith("handled ")]


def _consumer(url: str, form: str, name: str, behaviour: str, **options: Any) -> AppProcess:
    return AppProcess(MODULE, url, "jobs", form, name, 1.0, behaviour, cwd=ROOT, **options)


#: Killed mid-batch: once 200 entries are handled, while more are in its hands (reads of 50,
#: eight workers).
MID_BATCH = KillPoint.after_deliveries(200)


@pytest.mark.slow
@pytest.mark.parametrize("restart", ["same-name", "another-consumer"])
async def test_kill_9_of_a_reliable_consumer_mid_batch_loses_nothing(
    redis_server: RedisServer, redis: RedisClient, restart: str
) -> None:
    await _preload(redis)
    async with _consumer(redis_server.url, "reliable", "w1", "slow", kill_at=MID_BATCH) as first:
        await first.killed()
    held = await length(redis, processing_key("jobs", "w1"))
    assert held > 0  # killed mid-batch: entries in its hands
    # The same name takes its processing list back at once; another consumer's reaper
    # takes it once w1's heartbeat (1 s) has expired.
    name = "w1" if restart == "same-name" else "w2"
    async with _consumer(redis_server.url, "reliable", name, "ok") as second:

        async def drained() -> bool:
            return (
                await length(redis, "jobs") == 0
                and await length(redis, processing_key("jobs", "w1")) == 0
                and await length(redis, processing_key("jobs", name)) == 0
            )

        await eventually(drained, within=30, what="the list and processing lists drained")
        assert await second.stop() == 0
    handled = Counter(_handled(first.lines()) + _handled(second.lines()))
    assert set(handled) == set(range(ENTRIES)), "every entry handled at least once"
    duplicates = sum(handled.values()) - ENTRIES
    print(f"reliable list, kill -9 mid-batch ({restart}): {held} held, {duplicates} handled twice")
    assert duplicates <= held


@pytest.mark.slow
async def test_kill_9_of_a_simple_consumer_mid_batch_loses_what_it_had_popped(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await _preload(redis)
    async with _consumer(redis_server.url, "simple", "-", "slow", kill_at=MID_BATCH) as first:
        await first.killed()
    left = await length(redis, "jobs")
    async with _consumer(redis_server.url, "simple", "-", "ok") as second:

        async def drained() -> bool:
            return await length(redis, "jobs") == 0

        await eventually(drained, within=30, what="the list drained")
        assert await second.stop() == 0  # graceful: what it popped is handled before it exits
    handled = Counter(_handled(first.lines()) + _handled(second.lines()))
    lost = ENTRIES - len(handled)
    print(f"simple list, kill -9 mid-batch: {lost} of {ENTRIES} entries lost")
    assert max(handled.values()) == 1, "at-most-once: nothing handled twice"
    # What was lost is exactly what the dead process had popped and not handled.
    assert lost == ENTRIES - left - len(_handled(first.lines()))
    assert lost > 0


@pytest.mark.slow
@pytest.mark.parametrize("restart", ["same-name", "another-consumer"])
async def test_an_entry_that_kills_every_consumer_is_dead_lettered_after_max_attempts(
    redis_server: RedisServer, redis: RedisClient, restart: str
) -> None:
    # Each death counts as a delivery (the take-back of a restart under the same name, or the
    # reaper of another consumer), so max_attempts=3 stops the entry at its fourth delivery
    # instead of letting it kill consumers for ever.
    await redis.execute("RPUSH", "jobs", encode_frame(b"0", {"trace": "t0"}))
    for n in range(1, 10):
        await redis.execute("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    handled: set[int] = set()
    for run in range(1, 4):
        name = "w1" if restart == "same-name" else f"w{run}"
        victim = Consumer(redis_server.url, "jobs", "reliable", name, 1.0, "poison", module=MODULE)
        try:
            await victim.wait_line("poisoned")
            assert await victim.wait_exit() == -9
        finally:
            victim.kill()
        handled |= set(_handled(victim.lines))
    name = "w1" if restart == "same-name" else "w4"
    last = Consumer(redis_server.url, "jobs", "reliable", name, 1.0, "poison", module=MODULE)
    letters: list[tuple[bytes, dict[str, str]]] = []
    try:

        async def all_accounted_for() -> bool:
            letters[:] = [
                decode_frame(v) for v in await redis.execute("LRANGE", "jobs.dead", 0, -1)
            ]
            return handled | set(_handled(last.lines)) | {int(p) for p, _ in letters} == set(
                range(10)
            )

        await eventually(all_accounted_for, within=30, what="every entry handled or dead-lettered")
    finally:
        last.stop()
    assert "poisoned" not in last.lines  # not handled a fourth time
    by_payload = dict(letters)
    headers = by_payload[b"0"]
    assert headers["trace"] == "t0"
    assert headers["x-dead-letter-reason"] == "max-attempts"
    assert headers["x-dead-letter-attempts"] == "3"  # it ran three times, not a fourth
    assert REDELIVERED_HEADER not in headers
    # Entries read ahead while it was handled died with it each time, and may share its fate
    # (as a stream's delivery count does); never more than what one consumer holds.
    assert len(letters) <= 1 + 4
    assert await length(redis, "jobs") == 0
    assert await length(redis, processing_key("jobs", name)) == 0
