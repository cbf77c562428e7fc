"""Write-to-read latency of a live follower: a writer process and a following reader process.

The writer appends one message (its payload: the wall-clock ns just before ``append``) and
flushes, every 5 ms or 200 ms; the reader, a live ``FileSource`` in another process woken by
inotify, notes the wall-clock ns when ``read_available`` hands the message over. The peer,
measured in the same run and the same way: a process busy-polling the tail with the library's
sync ``FileReader`` (no wake-up to wait for, one CPU burnt), the floor a follower can approach.
Prints p50/p99 (medians over runs) and their ratios to the peer's, then the aims (p50 ≤ 0.5 ms,
p99 ≤ 2 ms) and the upstream Rust follower's p50, as references.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import REFERENCE_TAIL_P50_MS, capped, latency_options, reference

from trio_streams.file import FilePosition
from trio_streams.file.follower import FileSource
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter

AIM_P50_MS, AIM_P99_MS = 0.5, 2.0
PACINGS = ((5.0, 400), (200.0, 60))


async def reader(path: str, count: int) -> None:
    latencies: list[float] = []
    async with await FileSource.open(path, mode="live") as source:
        print("ready", flush=True)
        while len(latencies) < count:
            batch = source.read_available(64)
            now = time.time_ns()
            for message in batch:
                latencies.append((now - int(message.payload)) / 1e6)
            if not batch:
                await source.wait()
    print(json.dumps(latencies), flush=True)


def poller(path: str, count: int) -> None:
    """The peer: the library's sync reader polling the tail without pause."""
    latencies: list[float] = []
    with FileReader(path, on_eos="hold", start=FilePosition.end()) as tail:
        print("ready", flush=True)
        while len(latencies) < count:
            batch = tail.read_messages(64)
            now = time.time_ns()
            for message in batch:
                latencies.append((now - int(message.payload)) / 1e6)
    print(json.dumps(latencies), flush=True)


async def writer(path: str, count: int, pace_ms: float) -> None:
    with StreamWriter(path) as out:
        for _ in range(count):
            await trio.sleep(pace_ms / 1000)
            out.append("tick", b"%d" % time.time_ns())
            out.flush()


def run_once(
    path: Path, count: int, pace_ms: float, script: str = __file__, role: str = "reader"
) -> list[float]:
    """A fresh file, ``script --role ROLE`` following it and ``script --role writer`` writing
    ``count`` messages ``pace_ms`` apart; returns the follower's latencies in ms."""
    StreamWriter(path).close()
    me = [sys.executable, script]
    follower = subprocess.Popen(
        [*me, "--role", role, str(path), str(count)], stdout=subprocess.PIPE, text=True
    )
    assert follower.stdout is not None
    assert follower.stdout.readline().strip() == "ready"
    subprocess.run([*me, "--role", "writer", str(path), str(count), str(pace_ms)], check=True)
    latencies: list[float] = json.loads(follower.stdout.readline())
    follower.wait(timeout=30)
    path.unlink()
    return latencies


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def poll_once(path: Path, count: int, pace_ms: float) -> list[float]:
    return run_once(path, count, pace_ms, role="poller")


def medians(
    run: Callable[[Path, int, float], list[float]],
    path: Path,
    count: int,
    pace_ms: float,
    repeats: int,
) -> tuple[float, float, str]:
    """Median over ``repeats`` runs of p50 and of p99, and the runs' figures."""
    p50s, p99s = [], []
    for _ in range(repeats):
        latencies = run(path, count, pace_ms)
        p50s.append(percentile(latencies, 0.50))
        p99s.append(percentile(latencies, 0.99))
    runs = ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(p50s, p99s, strict=True))
    return statistics.median(p50s), statistics.median(p99s), runs


def main() -> None:
    options = latency_options(__doc__, reader, writer, poller)
    if options is None:
        return
    print(
        "pacing   messages  who                  p50 ms (x peer)   p99 ms (x peer)   runs p50/p99"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tail.ss"
        for pace_ms, count in PACINGS:
            count = capped(options, count)
            peer50, peer99, peer_runs = medians(poll_once, path, count, pace_ms, options.repeats)
            p50, p99, runs = medians(run_once, path, count, pace_ms, options.repeats)
            for who, a, b, r in (
                ("busy poll (peer)", peer50, peer99, peer_runs),
                ("FileSource (inotify)", p50, p99, runs),
            ):
                print(
                    f"{pace_ms:5.0f} ms {count:8d}  {who:<20} {a:6.3f} (x{a / peer50:4.2f})   "
                    f"{b:6.3f} (x{b / peer99:4.2f})   {r}"
                )
            met = p50 <= AIM_P50_MS and p99 <= AIM_P99_MS
            print(
                f"         aim p50 <= {AIM_P50_MS} ms, p99 <= {AIM_P99_MS} ms: "
                f"{'met' if met else 'NOT met'}; "
                + reference("Rust follower p50", f"{REFERENCE_TAIL_P50_MS[pace_ms]} ms")
            )


if __name__ == "__main__":
    main()
