"""In-process backlog memory: peak RSS of a process draining a 1M-message in-process stream.

The in-process transport keeps each stream's messages in memory (up to the broker's ``max_len``,
oldest trimmed first), so replays and seeks work as on a stream file: a backlog lives in the
process, whoever reads it. Each contender runs in a process of its own, one after the other; each
publishes ``--entries`` messages of 100 bytes to a ``MemoryBroker(max_len=entries)`` and then
drains them:

- **raw**: the in-process log alone (a ``Cursor`` taking 64 at a time, no framework): what
  holding the backlog costs, the peer;
- **framework**: an ``App`` with a ``MemoryStream("bench").replay()`` subscription whose handler
  is slow (``await trio.sleep(--sleep)``, ``--workers`` of them at once).

Each process samples its own RSS (``_rss.py``) and reports its peak, its RSS before it
published and after, and the RSS at each tenth of the drain; the parent prints the peaks, what
the framework adds over the log it drains, and the aim (peak < 100 MB), which a backlog of this
size held in memory cannot meet by design: the figure to compare is the framework's excess over
the raw log.

Run: ``python benchmarks/inprocess_backlog_rss.py [--entries N] [--workers N] [--sleep S]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import PAYLOAD
from _rss import Sampler, memory_mb, run_drain_process, show_drain, verdict

from trio_streams import App, MemoryBroker, MemoryStream, Position
from trio_streams.memory.log import Cursor

COUNT = 64


def publish(broker: MemoryBroker, entries: int) -> None:
    """``entries`` messages of 100 bytes, each its own bytes object (as published ones are)."""
    append = broker.hub.append
    head = PAYLOAD[:96]
    for n in range(entries):
        append("bench", head + n.to_bytes(4, "big"), {})


async def drain_raw(entries: int, interval: float) -> dict[str, Any]:
    sampler = Sampler(entries, interval)
    empty, _ = memory_mb()
    broker = MemoryBroker(max_len=entries)
    publish(broker, entries)
    before, _ = memory_mb()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        sampler.start()
        started = time.monotonic()
        cursor = Cursor(broker.hub, ("bench",), Position.beginning())
        while batch := cursor.take(COUNT):
            sampler.done += len(batch)
            await trio.lowlevel.checkpoint()
        elapsed = time.monotonic() - started
        nursery.cancel_scope.cancel()
    return {**sampler.report(before, elapsed), "empty_mb": empty}


async def drain_framework(
    entries: int, interval: float, workers: int, pause: float
) -> dict[str, Any]:
    sampler = Sampler(entries, interval)
    empty, _ = memory_mb()
    app = App("backlog")
    broker = app.broker(MemoryBroker(max_len=entries))
    publish(broker, entries)

    @broker.subscriber(MemoryStream("bench").replay(), name="drain", workers=workers)
    async def drain(payload: bytes) -> None:
        await trio.sleep(pause)  # a slow handler: reading is throttled, the backlog waits
        sampler.done += 1

    before, _ = memory_mb()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        sampler.start()
        started = time.monotonic()
        running = await nursery.start(app.serve)
        await running.wait_stopped()  # a replay ends by itself once everything is settled
        elapsed = time.monotonic() - started
        nursery.cancel_scope.cancel()
    return {**sampler.report(before, elapsed), "empty_mb": empty}


def run_drain(args: argparse.Namespace, contender: str) -> dict[str, Any]:
    return run_drain_process(__file__, args, contender)


def show(contender: str, result: dict[str, Any], entries: int) -> None:
    show_drain(
        contender,
        result,
        entries,
        f"RSS before publishing {result['empty_mb']:.1f} MB, with the backlog "
        f"{result['before_mb']:.1f} MB, peak {result['peak_mb']:.1f} MB (VmHWM)",
    )


def main(args: argparse.Namespace) -> None:
    results = {}
    for contender in ("raw", "framework"):
        result = run_drain(args, contender)
        show(contender, result, args.entries)
        if result["handled"] != args.entries:
            raise SystemExit(f"{contender}: the backlog was not fully drained")
        results[contender] = result
    framework, raw = results["framework"], results["raw"]
    print(
        f"peak RSS framework / raw log: {framework['peak_mb'] / raw['peak_mb']:.2f} "
        f"({framework['peak_mb']:.1f} MB / {raw['peak_mb']:.1f} MB, same run); the framework "
        f"adds +{framework['peak_mb'] - raw['peak_mb']:.1f} MB over the log it drains"
    )
    print(
        verdict(framework["peak_mb"])
        + f"; the log itself holds {raw['before_mb'] - raw['empty_mb']:.1f} MB of backlog"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=64, help="handlers at once")
    parser.add_argument("--sleep", type=float, default=0.001, help="seconds each handler takes")
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--drain", metavar="CONTENDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drain:
        if args.drain == "raw":
            report = trio.run(drain_raw, args.entries, args.sample)
        else:
            report = trio.run(drain_framework, args.entries, args.sample, args.workers, args.sleep)
        print(json.dumps(report))
    else:
        main(args)
