"""Publish-to-handler latency over a stream file: an app publishing in one process, a live
subscription's handler in another.

The publisher app calls ``publish`` every 5 ms or 200 ms with the wall-clock ns just before the
call as payload; the consumer app's handler (a live ``FileStream``, woken by inotify) notes the
wall-clock ns when it runs. The peer, measured in the same run and the same way: the
stream-file library alone, a ``StreamWriter`` process and a ``FileSource`` follower process
(``file_tail_latency.py``); beside it, the floor a follower can approach, a process
busy-polling the tail (one CPU burnt). The three take turns, round by round. Prints p50/p99
(medians over rounds) and their ratios to the library's, the aims (the app's p50 ≤ 1.3 times the
library's; the library's p50 at 5 ms spacing ≤ 0.2 ms), the upstream Rust follower's p50 as a
reference, and the CPU the consumer app and the library follower use while the file stays quiet
(they must stay near 0: no busy loop bought for latency).
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import REFERENCE_TAIL_P50_MS, capped, latency_options, reference
from file_tail_latency import (
    AIM_LIBRARY_P50_MS,
    PACINGS,
    idle_cpu,
    idle_options,
    interleaved,
    poll_once,
)
from file_tail_latency import __file__ as library_script
from file_tail_latency import run_once as library_run_once

from trio_streams import App
from trio_streams.file import FileBroker, FileStream

#: The app's p50 over the library's, at each spacing.
AIM_APP_RATIO = 1.3


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
    idle_seconds = idle_options()
    options = latency_options(__doc__, consumer, publisher)
    if options is None:
        return
    print(
        f"{options.repeats} rounds, the contenders taking turns in each; p50/p99 are medians "
        "over rounds"
    )
    print("pacing  who              p50 ms (x library)   p99 ms (x library)   rounds p50/p99")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "latency.ss"
        for pace_ms, count in PACINGS:
            count = capped(options, count)
            results = interleaved(
                {"busy poll (floor)": poll_once, "library": library_run_once, "app": app_run_once},
                path,
                count,
                pace_ms,
                options.repeats,
            )
            peer50, peer99, _ = results["library"]
            for who, (p50, p99, rounds) in results.items():
                print(
                    f"{pace_ms:4.0f} ms {who:<17} {p50:7.3f} (x{p50 / peer50:4.2f})      "
                    f"{p99:7.3f} (x{p99 / peer99:4.2f})      {rounds}"
                )
            app50 = results["app"][0]
            met = "met" if app50 <= AIM_APP_RATIO * peer50 else "NOT met"
            print(f"        aim: app p50 <= {AIM_APP_RATIO}x the library's: {met}")
            if pace_ms == 5.0:
                met = "met" if peer50 <= AIM_LIBRARY_P50_MS else "NOT met"
                print(f"        aim: library p50 <= {AIM_LIBRARY_P50_MS} ms: {met}")
            print(
                "        " + reference("Rust follower p50", f"{REFERENCE_TAIL_P50_MS[pace_ms]} ms")
            )
        for who, script, role in (
            ("the consumer app", __file__, "reader"),
            ("a library FileSource", library_script, "reader"),
        ):
            share = idle_cpu(path, idle_seconds, script=script, role=role)
            print(
                f"idle: {who} following a quiet file uses {share * 100:.2f} % of a core "
                f"({idle_seconds:.0f} s measured)"
            )


if __name__ == "__main__":
    main()
