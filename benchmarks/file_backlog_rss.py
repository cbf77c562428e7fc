"""Stream-file backlog memory: peak RSS of a process draining a 1M-message file, slow handler.

One run writes ``--entries`` messages of 100 bytes to a stream file, then drains it in a process
of its own per contender (so each peak is its own), one after the other:

- **raw**: the stream-file library alone (``FileSource.read_available``, 64 at a time, no
  framework), holding one read at a time: the peer;
- **framework**: an ``App`` with a ``FileBroker`` and a ``FileStream("bench").replay()``
  subscription whose handler is slow (``await trio.sleep(--sleep)``, ``--workers`` of them at
  once): reading is throttled by the bounded delivery channel, the backlog stays in the file.

Each process samples its own RSS (``_rss.py``) and reports its peak, its RSS before it started
reading and the RSS at each tenth of the drain; the parent checks every message was handled once
and prints the peaks, their ratio and the aim (peak < 100 MB).

Run: ``python benchmarks/file_backlog_rss.py [--entries N] [--workers N] [--sleep S]``.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _rss import Sampler, compare_peaks, memory_mb, reading_memory, run_drain_process, show_drain
from file_write import write_file

from trio_streams import App
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.follower import FileSource

COUNT = 64


async def drain_raw(path: Path, entries: int, interval: float) -> dict[str, Any]:
    sampler = Sampler(entries, interval)
    before, _ = memory_mb()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sampler.run)
        sampler.start()
        started = time.monotonic()
        async with await FileSource.open(path, mode="replay", keys=["bench"]) as source:
            while True:
                batch = source.read_available(COUNT)
                sampler.done += len(batch)
                if not batch:
                    if source.ended:
                        break
                    await source.wait()
                await trio.lowlevel.checkpoint()
        elapsed = time.monotonic() - started
        nursery.cancel_scope.cancel()
    return sampler.report(before, elapsed)


async def drain_framework(
    path: Path, entries: int, interval: float, workers: int, pause: float
) -> dict[str, Any]:
    sampler = Sampler(entries, interval)
    app = App("backlog")
    broker = app.broker(FileBroker(path, existing_only=True))

    @broker.subscriber(FileStream("bench").replay(), name="drain", workers=workers)
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
    return sampler.report(before, elapsed)


def run_drain(args: argparse.Namespace, contender: str, path: Path) -> dict[str, Any]:
    return run_drain_process(__file__, args, contender, str(path))


def show(contender: str, result: dict[str, Any], entries: int) -> None:
    show_drain(
        contender,
        result,
        entries,
        reading_memory(result),
    )


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "backlog.ss"
        started = time.monotonic()
        write_file(path, args.entries)
        print(f"wrote {args.entries} messages in {time.monotonic() - started:.1f} s")
        results = {}
        for contender in ("raw", "framework"):
            result = run_drain(args, contender, path)
            show(contender, result, args.entries)
            if result["handled"] != args.entries:
                raise SystemExit(f"{contender}: the backlog was not fully drained")
            results[contender] = result
    compare_peaks(results)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entries", type=int, default=1_000_000)
    parser.add_argument("--workers", type=int, default=64, help="handlers at once")
    parser.add_argument("--sleep", type=float, default=0.001, help="seconds each handler takes")
    parser.add_argument("--sample", type=float, default=0.5, help="seconds between samples")
    parser.add_argument("--drain", nargs=2, metavar=("CONTENDER", "PATH"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.drain:
        contender, where = args.drain
        if contender == "raw":
            report = trio.run(drain_raw, Path(where), args.entries, args.sample)
        else:
            report = trio.run(
                drain_framework, Path(where), args.entries, args.sample, args.workers, args.sleep
            )
        print(json.dumps(report))
    else:
        main(args)
