"""Redis stream consumption: the framework's group subscription vs the raw connection layer.

One run starts a fresh ``redis-server`` (no persistence, loopback), prefills a stream and
drains it through a consumer group twice per round, on the same server:

- **raw**: the connection layer alone, ``XREADGROUP COUNT 100`` then one ``XACK`` of the read's
  ids, on one connection: the floor the framework's transport is built on;
- **framework**: an ``App`` with a ``RedisBroker`` subscription (``count=100``, a no-op
  per-message handler taking the payload as ``bytes``): decode, dispatch, settle, one ``XACK``
  per read, leases and reclaim running.

Each figure is the median of ``--runs`` rounds, raw and framework alternating (so a
disturbance hits both); the script prints msgs/s of each and the ratio framework / raw. The
machine has 2 cores shared by the server and the client: compare the ratio.

Run: ``python benchmarks/redis_stream_consume.py [--entries N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.redis_servers import redis_server
from trio_streams import App, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect

COUNT = 100
PAYLOAD = b'{"id":1,"amount":9.5}'


async def prefill(redis: RedisClient, key: str, entries: int) -> None:
    await redis.execute("DEL", key)
    for start in range(0, entries, 1000):
        pipeline = redis.pipeline()
        for _ in range(min(1000, entries - start)):
            pipeline.add("XADD", key, "*", "_payload", PAYLOAD)
        (await pipeline.execute()).raise_first()


async def raw(url: str, key: str, entries: int) -> float:
    async with connect(url) as redis:
        await prefill(redis, key, entries)
        await redis.execute("XGROUP", "CREATE", key, "g", "0")
        taken = 0
        started = time.perf_counter()
        async with redis.dedicated_connection(key) as conn:
            while taken < entries:
                reply = await conn.execute(
                    "XREADGROUP", "GROUP", "g", "c", "COUNT", COUNT, "STREAMS", key, ">"
                )
                [(_, batch)] = reply.items() if isinstance(reply, dict) else reply
                ids = [entry_id for entry_id, _ in batch]
                await conn.execute("XACK", key, "g", *ids)
                taken += len(ids)
        return entries / (time.perf_counter() - started)


async def framework(url: str, key: str, entries: int) -> float:
    async with connect(url) as redis:
        await prefill(redis, key, entries)
    app = App("bench")
    broker = app.broker(RedisBroker(url))
    handled = 0
    done = trio.Event()

    @broker.subscriber(
        RedisStream(key, group="g", start=Position.beginning()), name="consume", count=COUNT
    )
    async def consume(body: bytes) -> None:
        nonlocal handled
        handled += 1
        if handled == entries:
            done.set()

    async with trio.open_nursery() as nursery:
        started = time.perf_counter()
        running = await nursery.start(app.serve)
        await done.wait()
        elapsed = time.perf_counter() - started
        await running.aclose()
    return entries / elapsed


async def main(entries: int, runs: int) -> None:
    with redis_server() as server:
        results: dict[str, list[float]] = {"raw": [], "framework": []}
        for run in range(runs):
            results["raw"].append(await raw(server.url, f"raw-{run}", entries))
            results["framework"].append(await framework(server.url, f"fw-{run}", entries))
    raw_rate = statistics.median(results["raw"])
    fw_rate = statistics.median(results["framework"])
    print(f"entries per run: {entries}, COUNT {COUNT}, runs: {runs}")
    print(f"raw connection layer (XREADGROUP + XACK): {raw_rate:10.0f} msgs/s")
    print(f"framework (RedisStream, no-op handler):   {fw_rate:10.0f} msgs/s")
    print(f"ratio framework / raw: {fw_rate / raw_rate:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    trio.run(main, args.entries, args.runs)
