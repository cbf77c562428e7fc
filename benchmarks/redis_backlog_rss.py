"""Redis backlog memory: peak RSS of a process draining a 1M-entry backlog with a slow handler.

One run starts a fresh ``redis-server`` (no persistence, loopback), prefills one stream with
``--entries`` entries (pipelined ``XADD``, 1000 per round trip) and creates two consumer groups
at its beginning, so each contender drains the whole same backlog. Each drains it in a process
of its own (so each peak is its own), one after the other:

- **raw**: the connection layer alone, ``XREADGROUP COUNT 100`` then one ``XACK`` of the read's
  ids, on one connection: what a process holding one read at a time costs, the peer;
- **framework**: an ``App`` with a ``RedisBroker`` subscription (``count=100``) whose handler is
  slow (``await trio.sleep(--sleep)``, ``--workers`` of them at once): reading is throttled by
  the bounded delivery channel, the backlog stays in Redis, leases and reclaim run.

Each process samples its own RSS (``VmRSS`` in ``/proc/self/status``, Linux) every
``--sample`` seconds and reports its peak (``VmHWM``), its RSS before it started reading, and
the curve: RSS at each tenth of the drain. The parent checks that both groups drained fully
(every entry handled once, nothing left pending) and prints the peaks and their ratio.

Run: ``python benchmarks/redis_backlog_rss.py [--entries N] [--workers N] [--sleep S]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _rss import Sampler, compare_peaks, memory_mb, reading_memory, run_drain_process, show_drain

from tests.redis_servers import redis_server
from trio_streams import App, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import connect

COUNT = 100
PAYLOAD = b'{"id":1,"amount":9.5,"note":"a backlog entry of about a hundred bytes, padded."}'
KEY = "backlog"


async def drain_raw(url: str, entries: int, interval: float) -> dict[str, Any]:
    sampler = Sampler(entries, interval)
    async with connect(url) as redis, redis.dedicated_connection(KEY) as conn:
        before, _ = memory_mb()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sampler.run)
            sampler.start()
            started = time.monotonic()
            while True:
                reply = await conn.execute(
                    "XREADGROUP", "GROUP", "raw", "c", "COUNT", COUNT, "STREAMS", KEY, ">"
                )
                if reply is None:
                    break
                [(_, batch)] = reply.items() if isinstance(reply, dict) else reply
                if not batch:
                    break
                await conn.execute("XACK", KEY, "raw", *[entry_id for entry_id, _ in batch])
                sampler.done += len(batch)
            elapsed = time.monotonic() - started
            nursery.cancel_scope.cancel()
    return sampler.report(before, elapsed)


async def drain_framework(
    url: str, entries: int, interval: float, workers: int, pause: float
) -> dict[str, Any]:
    sampler = Sampler(entries, interval)
    app = App("backlog")
    broker = app.broker(RedisBroker(url))
    done = trio.Event()

    @broker.subscriber(
        RedisStream(KEY, group="framework", start=Position.beginning()),
        name="drain",
        count=COUNT,
        workers=workers,
    )
    async def drain(body: bytes) -> None:
        await trio.sleep(pause)  # a slow handler: reading is throttled, the backlog waits
        sampler.done += 1
        if sampler.done == entries:
            done.set()

    before, _ = memory_mb()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        sampler.start()
        started = time.monotonic()
        running = await nursery.start(app.serve)
        await done.wait()
        elapsed = time.monotonic() - started
        await running.aclose()
        nursery.cancel_scope.cancel()
    return sampler.report(before, elapsed)


async def prefill(url: str, entries: int) -> None:
    async with connect(url) as redis:
        await redis.execute("DEL", KEY)
        for start in range(0, entries, 1000):
            pipeline = redis.pipeline()
            for _ in range(min(1000, entries - start)):
                pipeline.add("XADD", KEY, "*", "_payload", PAYLOAD)
            (await pipeline.execute()).raise_first()
        for group in ("raw", "framework"):
            await redis.execute("XGROUP", "CREATE", KEY, group, "0")


async def check(url: str, group: str) -> tuple[int, int]:
    """``(entries delivered to the group, entries still pending)``."""
    async with connect(url) as redis:
        pending = await redis.execute("XPENDING", KEY, group)
        info = await redis.execute("XINFO", "GROUPS", KEY)
    for item in info:
        fields = item if isinstance(item, dict) else dict(zip(item[::2], item[1::2], strict=True))
        fields = {k.decode() if isinstance(k, bytes) else k: v for k, v in fields.items()}
        name = fields["name"]
        if (name.decode() if isinstance(name, bytes) else name) == group:
            read = int(fields["entries-read"])
            return read, int(pending[0])
    raise SystemExit(f"group {group!r} is missing")


def run_drain(args: argparse.Namespace, contender: str, url: str) -> dict[str, Any]:
    return run_drain_process(__file__, args, contender, url)


def show(contender: str, result: dict[str, Any], read: int, pending: int, entries: int) -> None:
    show_drain(
        contender,
        result,
        entries,
        reading_memory(result),
        f"; group read {read}, pending after {pending}",
    )


def main(args: argparse.Namespace) -> None:
    with redis_server() as server:
        started = time.monotonic()
        trio.run(prefill, server.url, args.entries)
        print(f"prefilled {args.entries} entries in {time.monotonic() - started:.1f} s")
        results = {}
        for contender in ("raw", "framework"):
            result = run_drain(args, contender, server.url)
            read, pending = trio.run(check, server.url, contender)
            show(contender, result, read, pending, args.entries)
            if result["handled"] != args.entries or read != args.entries or pending:
                raise SystemExit(f"{contender}: the backlog was not fully drained")
            results[contender] = result
    compare_peaks(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=64, help="handlers at once")
    parser.add_argument("--sleep", type=float, default=0.001, help="seconds each handler takes")
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--drain", nargs=2, metavar=("CONTENDER", "URL"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drain:
        contender, url = args.drain
        if contender == "raw":
            report = trio.run(drain_raw, url, args.entries, args.sample)
        else:
            report = trio.run(
                drain_framework, url, args.entries, args.sample, args.workers, args.sleep
            )
        print(json.dumps(report))
    else:
        main(args)
