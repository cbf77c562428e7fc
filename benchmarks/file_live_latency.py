"""Publish-to-handler latency over a stream file: an app publishing in one process, a live
subscription's handler in another.

The publisher app calls ``publish`` every 5 ms or 200 ms with the wall-clock ns just before the
call as payload; the consumer app's handler (a live ``FileStream``, woken by inotify) notes the
wall-clock ns when it runs. The peer, measured in the same run and the same way, is the
stream-file library alone: a ``StreamWriter`` process and a ``FileSource`` follower process
(``file_tail_latency.py``). Prints p50/p99 (medians over runs) and their ratios to the library
peer's, then the aims (p50 ≤ 1 ms, p99 ≤ 3 ms) and the upstream Rust follower's p50, as
references.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import REFERENCE_TAIL_P50_MS, capped, latency_options, reference
from file_tail_latency import PACINGS, percentile
from file_tail_latency import run_once as library_run_once

from trio_streams import App
from trio_streams.file import FileBroker, FileStream

AIM_P50_MS, AIM_P99_MS = 1.0, 3.0


async def consumer(path: str, count: int) -> None:
    app = App("latency-consumer")
    broker = app.broker(FileBroker(path, existing_only=True))
    latencies: list[float] = []
    done = trio.Event()

    @broker.subscriber(FileStream("tick"))
    async def handle(payload: bytes) -> None:
        latencies.append((time.time_ns() - int(payload)) / 1e6)
        if len(latencies) == count:
            done.set()

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        print("ready", flush=True)
        await done.wait()
        await running.aclose()
    print(json.dumps(latencies), flush=True)


async def publisher(path: str, count: int, pace_ms: float) -> None:
    app = App("latency-publisher")
    broker = app.broker(FileBroker(path))
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        for _ in range(count):
            await trio.sleep(pace_ms / 1000)
            await broker.publish("tick", b"%d" % time.time_ns())
        await running.aclose()


def app_run_once(path: Path, count: int, pace_ms: float) -> list[float]:
    return library_run_once(path, count, pace_ms, script=__file__)


def main() -> None:
    options = latency_options(__doc__, consumer, publisher)
    if options is None:
        return
    print("pacing  who        p50 ms (x library)   p99 ms (x library)   runs p50/p99")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "latency.ss"
        for pace_ms, count in PACINGS:
            count = capped(options, count)
            results = {}
            for who, run_once in (("library", library_run_once), ("app", app_run_once)):
                p50s, p99s = [], []
                for _ in range(options.repeats):
                    latencies = run_once(path, count, pace_ms)
                    p50s.append(percentile(latencies, 0.50))
                    p99s.append(percentile(latencies, 0.99))
                results[who] = (statistics.median(p50s), statistics.median(p99s), p50s, p99s)
            peer50, peer99 = results["library"][:2]
            for who, (p50, p99, p50s, p99s) in results.items():
                print(
                    f"{pace_ms:4.0f} ms {who:<8} {p50:7.3f} (x{p50 / peer50:4.2f})      "
                    f"{p99:7.3f} (x{p99 / peer99:4.2f})      "
                    + ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(p50s, p99s, strict=True))
                )
            p50, p99 = results["app"][:2]
            met = p50 <= AIM_P50_MS and p99 <= AIM_P99_MS
            print(
                f"        aim p50 <= {AIM_P50_MS} ms, p99 <= {AIM_P99_MS} ms: "
                f"{'met' if met else 'NOT met'}; "
                + reference("Rust follower p50", f"{REFERENCE_TAIL_P50_MS[pace_ms]} ms")
            )


if __name__ == "__main__":
    main()
