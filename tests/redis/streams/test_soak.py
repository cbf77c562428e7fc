"""Soak: two consumer processes of one group, killed (-9) and restarted 30 times over 50k
entries. Nothing is lost, the pending list ends empty, duplicates are counted and reported."""

from __future__ import annotations

import random

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient

from .procs import Consumer
from .support import pending_count

ENTRIES = 50_000
KILLS = 30


def handled(consumers: list[Consumer]) -> list[int]:
    return [
        int(line.split()[1])
        for consumer in consumers
        for line in list(consumer.lines)
        if line.startswith("handled ")
    ]


@pytest.mark.soak
async def test_30_kills_over_50k_entries_with_two_consumers_lose_nothing(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for first in range(1, ENTRIES + 1, 1000):
        pipeline = redis.pipeline()
        for n in range(first, first + 1000):
            pipeline.add("XADD", "s", "*", "_payload", str(n))
        (await pipeline.execute()).raise_first()
    rng = random.Random(12)
    every: list[Consumer] = []

    def start(name: str) -> Consumer:
        consumer = Consumer(redis_server.url, "s", "g", name, 1.0, "slow")
        every.append(consumer)
        return consumer

    running = {"c1": start("c1"), "c2": start("c2")}
    try:
        for _ in range(KILLS):
            target = len(handled(every)) + 1000

            async def progressed(target: int = target) -> bool:
                await trio.lowlevel.checkpoint()
                return len(handled(every)) >= target

            await eventually(progressed, within=60, what="a thousand more entries handled")
            name = rng.choice(["c1", "c2"])
            running[name].kill()
            running[name] = start(name)

        async def all_handled() -> bool:
            await trio.lowlevel.checkpoint()
            return len(set(handled(every))) == ENTRIES

        await eventually(all_handled, within=120, what="every entry handled")

        async def settled() -> bool:
            return bool(await pending_count(redis, "s", "g") == 0)

        await eventually(settled, within=60, what="an empty pending list")
    finally:
        for consumer in running.values():
            consumer.stop()
    seen = handled(every)
    duplicates = len(seen) - len(set(seen))
    print(f"soak: {ENTRIES} entries, {KILLS} kills, {duplicates} duplicates handled")
    assert set(seen) == set(range(1, ENTRIES + 1))
    assert await redis.execute("XLEN", "s.dead") == 0
