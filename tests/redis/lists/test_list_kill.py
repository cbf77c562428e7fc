"""kill -9 of a list consumer process mid-batch: the reliable list loses nothing, the simple
list loses what the dead process had popped (measured, printed)."""

from __future__ import annotations

from collections import Counter

import pytest

from tests.redis.client.redis_waits import eventually
from tests.redis.streams.procs import Consumer
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.lists import processing_key

from .support import length

ENTRIES = 2000
MODULE = "tests.redis.lists.list_app"


async def _preload(redis: RedisClient) -> None:
    pipeline = redis.pipeline()
    for n in range(ENTRIES):
        pipeline.add("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    await pipeline.execute(raise_on_error=True)


def _handled(consumer: Consumer) -> list[int]:
    return [int(line.split()[1]) for line in consumer.lines if line.startswith("handled ")]


async def _kill_mid_batch(consumer: Consumer, redis: RedisClient) -> None:
    """Kill ``consumer`` once it has handled some entries and while more are in its hands."""
    await consumer.wait_line("handled ")

    async def some_done() -> bool:
        return len(_handled(consumer)) >= 200

    await eventually(some_done, within=20, what="200 entries handled")
    consumer.kill()


@pytest.mark.parametrize("restart", ["same-name", "another-consumer"])
async def test_kill_9_of_a_reliable_consumer_mid_batch_loses_nothing(
    redis_server: RedisServer, redis: RedisClient, restart: str
) -> None:
    await _preload(redis)
    first = Consumer(redis_server.url, "jobs", "reliable", "w1", 1.0, "slow", module=MODULE)
    second: Consumer | None = None
    try:
        await _kill_mid_batch(first, redis)
        held = await length(redis, processing_key("jobs", "w1"))
        assert held > 0  # killed mid-batch: entries in its hands
        # The same name takes its processing list back at once; another consumer's reaper
        # takes it once w1's heartbeat (1 s) has expired.
        name = "w1" if restart == "same-name" else "w2"
        second = Consumer(redis_server.url, "jobs", "reliable", name, 1.0, "ok", module=MODULE)

        async def drained() -> bool:
            return (
                await length(redis, "jobs") == 0
                and await length(redis, processing_key("jobs", "w1")) == 0
                and await length(redis, processing_key("jobs", name)) == 0
            )

        await eventually(drained, within=30, what="the list and processing lists drained")
        second.stop()
        handled = Counter(_handled(first) + _handled(second))
    finally:
        first.kill()
        if second is not None:
            second.kill()
    assert set(handled) == set(range(ENTRIES)), "every entry handled at least once"
    duplicates = sum(handled.values()) - ENTRIES
    print(f"reliable list, kill -9 mid-batch ({restart}): {held} held, {duplicates} handled twice")
    assert duplicates <= held


async def test_kill_9_of_a_simple_consumer_mid_batch_loses_what_it_had_popped(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await _preload(redis)
    first = Consumer(redis_server.url, "jobs", "simple", "-", 1.0, "slow", module=MODULE)
    second: Consumer | None = None
    try:
        await _kill_mid_batch(first, redis)
        left = await length(redis, "jobs")
        second = Consumer(redis_server.url, "jobs", "simple", "-", 1.0, "ok", module=MODULE)

        async def drained() -> bool:
            return await length(redis, "jobs") == 0

        await eventually(drained, within=30, what="the list drained")
        second.stop()  # graceful: what it popped is handled before it exits
        handled = Counter(_handled(first) + _handled(second))
    finally:
        first.kill()
        if second is not None:
            second.kill()
    lost = ENTRIES - len(handled)
    print(f"simple list, kill -9 mid-batch: {lost} of {ENTRIES} entries lost")
    assert max(handled.values()) == 1, "at-most-once: nothing handled twice"
    # What was lost is exactly what the dead process had popped and not handled.
    assert lost == ENTRIES - left - len(_handled(first))
    assert lost > 0
