"""Soak: two reliable list consumer processes, killed (-9) 30 times over 50k entries, each
restarted under a fresh name half the time (so the reapers recover its processing list) and
under its own name otherwise (so it takes it back). Nothing is lost, every processing list
ends empty, duplicates are counted and reported."""

from __future__ import annotations

import itertools
import random

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis.streams.procs import Consumer
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame

ENTRIES = 50_000
KILLS = 30
MODULE = "tests.redis.lists.list_app"


def handled(consumers: list[Consumer]) -> list[int]:
    return [
        int(line.split()[1])
        for consumer in consumers
        for line in list(consumer.lines)
        if line.startswith("handled ")
    ]


@pytest.mark.soak
async def test_30_kills_over_50k_entries_with_two_reliable_consumers_lose_nothing(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for first in range(0, ENTRIES, 1000):
        pipeline = redis.pipeline()
        for n in range(first, first + 1000):
            pipeline.add("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
        (await pipeline.execute()).raise_first()
    rng = random.Random(14)
    fresh = itertools.count(1)
    every: list[Consumer] = []

    def start(name: str) -> Consumer:
        consumer = Consumer(redis_server.url, "jobs", "reliable", name, 1.0, "slow", module=MODULE)
        every.append(consumer)
        return consumer

    running = {"a": start("a"), "b": start("b")}
    try:
        for _ in range(KILLS):
            target = len(handled(every)) + 1000

            async def progressed(target: int = target) -> bool:
                await trio.lowlevel.checkpoint()
                return len(handled(every)) >= target

            await eventually(progressed, within=60, what="a thousand more entries handled")
            slot = rng.choice(["a", "b"])
            running[slot].kill()
            name = slot if rng.random() < 0.5 else f"{slot}{next(fresh)}"
            running[slot] = start(name)

        async def drained() -> bool:
            keys = await redis.execute("KEYS", "{jobs}:processing:*")
            lengths = [await redis.execute("LLEN", key) for key in keys]
            return await redis.execute("LLEN", "jobs") == 0 and not any(lengths)

        await eventually(drained, within=120, what="the list and every processing list empty")
    finally:
        for consumer in running.values():
            consumer.stop()
    seen = handled(every)
    duplicates = len(seen) - len(set(seen))
    print(f"list soak: {ENTRIES} entries, {KILLS} kills, {duplicates} duplicates handled")
    assert set(seen) == set(range(ENTRIES))
