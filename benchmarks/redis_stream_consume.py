"""Redis stream consumption: the framework's group subscription vs the raw connection layer.

One run starts a fresh ``redis-server`` (no persistence, loopback), prefills a stream and
drains it through a consumer group twice per round, on the same server:

- **raw**: the connection layer alone, ``XREADGROUP COUNT 100`` then one ``XACK`` of the read's
  ids, on one connection: the floor the framework's transport is built on;
- **framework**: an ``App`` with a ``RedisBroker`` subscription (``count=100``, a no-op
  per-message handler taking the payload as ``bytes``): decode, dispatch, settle, one ``XACK``
  per read, leases and reclaim running.

With ``--faststream-python PATH`` (an interpreter with ``faststream[redis]`` 0.7.0 and
``hiredis`` installed, which redis-py then parses with; kept out of this project's environment
and checked before anything runs, see ``_redis_peers.py``), each round also drains the same
number of entries with FastStream in a subprocess under asyncio (``_faststream_peer.py``: a
``StreamSub`` of the same group shape, ``max_records=100``, its per-message logging off), per
message and in batch mode.

Each figure is the median of ``--runs`` rounds, the contenders alternating (so a disturbance
hits all of them); the script prints msgs/s of each and the ratios. The machine has 2 cores
shared by the server and the clients: compare the ratios.

Run: ``python benchmarks/redis_stream_consume.py [--entries N] [--runs N] [--server NAME|PATH]
[--faststream-python PATH]`` (``--server``: the server binary, as the tests choose it; see
``redis_drain_args``).
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _common import redis_drain_args

from tests.redis_servers import redis_server
from trio_streams import App, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect

COUNT = 100
#: The aim: the framework drains at least this share of the raw consume + XACK rate.
AIM_RATIO = 0.7
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


async def faststream(python: str, url: str, key: str, entries: int, mode: str) -> float:
    async with connect(url) as redis:
        await prefill(redis, key, entries)
        # Its group starts at the stream's start, as the framework's does (the peer reads ">").
        await redis.execute("XGROUP", "CREATE", key, "g", "0")
    peer = str(Path(__file__).with_name("_faststream_peer.py"))
    done = await trio.run_process([python, peer, url, key, str(entries), mode], capture_stdout=True)
    return float(done.stdout.decode().split()[-1])


async def main(entries: int, runs: int, peer_python: str | None) -> None:
    results: dict[str, list[float]] = {"raw": [], "framework": []}
    with redis_server() as server:
        for run in range(runs):
            results["raw"].append(await raw(server.url, f"raw-{run}", entries))
            results["framework"].append(await framework(server.url, f"fw-{run}", entries))
            if peer_python is not None:
                for mode in ("message", "batch"):
                    rate = await faststream(
                        peer_python, server.url, f"fs-{mode}-{run}", entries, mode
                    )
                    results.setdefault(f"faststream {mode}", []).append(rate)
    rates = {name: statistics.median(values) for name, values in results.items()}
    print(f"entries per run: {entries}, COUNT {COUNT}, runs: {runs}")
    print(f"raw connection layer (XREADGROUP + XACK): {rates['raw']:10.0f} msgs/s")
    print(f"framework (RedisStream, no-op handler):   {rates['framework']:10.0f} msgs/s")
    ratio = rates["framework"] / rates["raw"]
    rounds = [f / r for f, r in zip(results["framework"], results["raw"], strict=True)]
    print(f"ratio framework / raw: {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in rounds)})")
    met = "met" if ratio >= AIM_RATIO else "NOT met"
    print(f"aim: framework >= x{AIM_RATIO:.2f} of raw consume + XACK ({met}: x{ratio:.2f})")
    for mode in ("message", "batch"):
        name = f"faststream {mode}"
        if name in rates:
            print(
                f"FastStream 0.7 {mode:>7} ({entries} entries): {rates[name]:10.0f} msgs/s;"
                f" framework / FastStream {mode}: {rates['framework'] / rates[name]:.1f}x"
            )


if __name__ == "__main__":
    args = redis_drain_args(__doc__.splitlines()[0])
    trio.run(main, args.entries, args.runs, args.faststream_python)
