"""Soak: two consumer processes of one group, killed (-9) and restarted 30 times over 50k
entries. Nothing is lost, the pending list ends empty, duplicates are counted and reported.

Each incarnation of a consumer is killed by the kit after a random number of deliveries
(``KillPoint.after_deliveries``), exactly there, until 30 kills are spent; then both run on
until every entry has been handled."""

from __future__ import annotations

import random

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient
from trio_streams.testing.faults import AppProcess, KillPoint

from .procs import ROOT
from .support import pending_count

ENTRIES = 50_000
KILLS = 30
MODULE = "tests.redis.streams.consumer_app"


def handled(consumers: list[AppProcess]) -> list[int]:
    return [
        int(line.split()[1])
        for consumer in consumers
        for line in consumer.lines()
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
    every: list[AppProcess] = []
    kills = 0
    all_handled = trio.Event()

    def consumer(name: str, kill_at: KillPoint | None) -> AppProcess:
        process = AppProcess(
            MODULE, redis_server.url, "s", "g", name, 1.0, "slow",
            kill_at=kill_at, cwd=ROOT, timeout=120,
        )  # fmt: skip
        every.append(process)
        return process

    async def slot(name: str) -> None:
        """One consumer name: killed and restarted while kills are left, then run to the end."""
        nonlocal kills
        while kills < KILLS:
            kills += 1
            point = KillPoint.after_deliveries(rng.randint(500, 1500))
            async with consumer(name, point) as victim:
                await victim.killed()
        async with consumer(name, None) as last:
            await all_handled.wait()
            assert await last.stop() == 0

    async with trio.open_nursery() as nursery:
        nursery.start_soon(slot, "c1")
        nursery.start_soon(slot, "c2")

        async def every_entry() -> bool:
            await trio.lowlevel.checkpoint()
            return len(set(handled(every))) == ENTRIES

        await eventually(every_entry, within=600, what="every entry handled")

        async def settled() -> bool:
            return bool(await pending_count(redis, "s", "g") == 0)

        await eventually(settled, within=60, what="an empty pending list")
        all_handled.set()
    seen = handled(every)
    duplicates = len(seen) - len(set(seen))
    print(f"soak: {ENTRIES} entries, {kills} kills, {duplicates} duplicates handled")
    assert kills == KILLS
    assert set(seen) == set(range(1, ENTRIES + 1))
    assert await redis.execute("XLEN", "s.dead") == 0
