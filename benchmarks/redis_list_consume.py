"""Redis list consumption: the reliable list subscription vs the raw connection layer doing
the same moves and removals, and FastStream's (at-most-once) list subscriber.

One run starts a fresh ``redis-server`` (no persistence, loopback), prefills a list and drains
it, per round, with each contender on the same server:

- **raw**: the connection layer alone, what a reliable list costs on the wire: one write of
  ``BLMOVE`` + 99 ``LMOVE`` (into a processing list), then one write of 100 ``LREM``, on one
  connection: the floor the transport is built on;
- **reliable**: an ``App`` with ``RedisList(key, reliable=True)`` (``count=100``, a no-op
  per-message handler taking the payload as ``bytes``): frames decoded, dispatch, the window's
  100 ``LREM`` per read, heartbeat, reaper and promoter running;
- **simple**: ``RedisList(key)`` (``BLMPOP ... COUNT 100``), at-most-once, for comparison.

With ``--faststream-python PATH`` (an interpreter with ``faststream[redis]`` 0.7.0 and
``hiredis`` installed, which redis-py then parses with; kept out of this project's environment
and checked before anything runs, see ``_redis_peers.py``), each round also drains the same
number of entries with FastStream 0.7 in a subprocess under asyncio
(``_faststream_list_peer.py``): its list subscriber (``BLPOP`` per message) and its batch list
subscriber (``LPOP ... COUNT 100``), both at-most-once, logging off.

Each figure is the median of ``--runs`` rounds, the contenders alternating (so a disturbance
hits all of them); the script prints msgs/s of each and the ratios. The machine has 2 cores
shared by the server and the clients: compare the ratios.

The aim: the reliable list drains at least x0.7 of the raw moves' rate.

Run: ``python benchmarks/redis_list_consume.py [--entries N] [--runs N] [--server NAME|PATH]
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
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisList
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.frames import encode_frame

COUNT = 100
#: The aim: the reliable list drains at least this share of the raw moves' rate.
AIM_RATIO = 0.7
PAYLOAD = b'{"id":1,"amount":9.5}'


async def prefill(redis: RedisClient, key: str, entries: int, value: bytes) -> None:
    await redis.execute("DEL", key)
    for start in range(0, entries, 1000):
        pipeline = redis.pipeline()
        for _ in range(min(1000, entries - start)):
            pipeline.add("RPUSH", key, value)
        (await pipeline.execute()).raise_first()


async def raw(url: str, key: str, entries: int) -> float:
    processing = f"{{{key}}}:processing:raw"
    moves: list[tuple[str | int, ...]] = [("BLMOVE", key, processing, "LEFT", "LEFT", 1)]
    moves += [("LMOVE", key, processing, "LEFT", "LEFT")] * (COUNT - 1)
    async with connect(url) as redis:
        await prefill(redis, key, entries, encode_frame(PAYLOAD, {}))
        taken = 0
        started = time.perf_counter()
        async with redis.dedicated_connection(key) as conn:
            while taken < entries:
                values = [v for v in await conn.execute_many(moves) if v is not None]
                await conn.execute_many([("LREM", processing, 1, v) for v in values])
                taken += len(values)
        return entries / (time.perf_counter() - started)


async def framework(url: str, key: str, entries: int, *, reliable: bool) -> float:
    async with connect(url) as redis:
        await prefill(redis, key, entries, encode_frame(PAYLOAD, {}))
    app = App("bench")
    broker = app.broker(RedisBroker(url))
    handled = 0
    done = trio.Event()

    source = RedisList(key, reliable=True, consumer="bench") if reliable else RedisList(key)

    @broker.subscriber(source, name="consume", count=COUNT)
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
        await prefill(redis, key, entries, PAYLOAD)
    peer = str(Path(__file__).with_name("_faststream_list_peer.py"))
    done = await trio.run_process([python, peer, url, key, str(entries), mode], capture_stdout=True)
    return float(done.stdout.decode().split()[-1])


async def main(entries: int, runs: int, peer_python: str | None) -> None:
    results: dict[str, list[float]] = {"raw": [], "reliable": [], "simple": []}
    with redis_server() as server:
        for run in range(runs):
            results["raw"].append(await raw(server.url, f"raw-{run}", entries))
            results["reliable"].append(
                await framework(server.url, f"rel-{run}", entries, reliable=True)
            )
            results["simple"].append(
                await framework(server.url, f"sim-{run}", entries, reliable=False)
            )
            if peer_python is not None:
                for mode in ("message", "batch"):
                    rate = await faststream(
                        peer_python, server.url, f"fs-{mode}-{run}", entries, mode
                    )
                    results.setdefault(f"faststream {mode}", []).append(rate)
    rates = {name: statistics.median(values) for name, values in results.items()}
    reliable = rates["reliable"]
    print(f"entries per run: {entries}, COUNT {COUNT}, runs: {runs}")
    print(f"raw connection layer (BLMOVE+LMOVEs, LREMs): {rates['raw']:10.0f} msgs/s")
    print(f"framework reliable (RedisList, no-op):        {reliable:10.0f} msgs/s")
    print(f"framework simple (BLMPOP, at-most-once):      {rates['simple']:10.0f} msgs/s")
    ratio = reliable / rates["raw"]
    rounds = [f / r for f, r in zip(results["reliable"], results["raw"], strict=True)]
    print(f"ratio reliable / raw: {ratio:.2f} (rounds: {', '.join(f'{r:.2f}' for r in rounds)})")
    met = "met" if ratio >= AIM_RATIO else "NOT met"
    print(f"aim: reliable >= x{AIM_RATIO:.2f} of the raw moves ({met}: x{ratio:.2f})")
    for mode in ("message", "batch"):
        name = f"faststream {mode}"
        if name in rates:
            print(
                f"FastStream 0.7 list {mode:>7} ({entries} entries, at-most-once): "
                f"{rates[name]:10.0f} msgs/s; reliable / FastStream {mode}: "
                f"{reliable / rates[name]:.1f}x"
            )


if __name__ == "__main__":
    args = redis_drain_args(__doc__.splitlines()[0])
    trio.run(main, args.entries, args.runs, args.faststream_python)
