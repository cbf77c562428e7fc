"""Write-to-read latency of a live follower: a writer process and a following reader process.

The writer appends one message (its payload: the wall-clock ns just before ``append``) and
flushes, every 5 ms or 200 ms; the reader, a live ``FileSource`` in another process woken by
inotify, notes the wall-clock ns when ``read_available`` hands the message over. Prints p50/p99
(medians over runs) against the aims (p50 ≤ 0.5 ms, p99 ≤ 2 ms) and the Rust follower's figures
on this machine class (p50 0.3 to 0.6 ms, p99 0.7 to 3 ms; ratios use the middle of each range).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import latency_options

from trio_streams.file.follower import FileSource
from trio_streams.file.writer import StreamWriter

AIM_P50_MS, AIM_P99_MS = 0.5, 2.0
RUST_P50_MS, RUST_P99_MS = (0.3 + 0.6) / 2, (0.7 + 3.0) / 2


async def reader(path: str, count: int) -> None:
    latencies = []
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


async def writer(path: str, count: int, pace_ms: float) -> None:
    with StreamWriter(path) as out:
        for _ in range(count):
            await trio.sleep(pace_ms / 1000)
            out.append("tick", b"%d" % time.time_ns())
            out.flush()


def run_once(path: Path, count: int, pace_ms: float, script: str = __file__) -> list[float]:
    """A fresh file, ``script --role reader`` following it and ``script --role writer`` writing
    ``count`` messages ``pace_ms`` apart; returns the reader's latencies in ms."""
    StreamWriter(path).close()
    me = [sys.executable, script]
    follower = subprocess.Popen(
        [*me, "--role", "reader", str(path), str(count)], stdout=subprocess.PIPE, text=True
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


def main() -> None:
    options = latency_options(__doc__, reader, writer)
    if options is None:
        return
    print("pacing   messages   p50 ms (x aim, x Rust)        p99 ms (x aim, x Rust)      runs")
    with tempfile.TemporaryDirectory() as tmp:
        for pace_ms, count in ((5.0, 400), (200.0, 60)):
            p50s, p99s = [], []
            for _ in range(options.repeats):
                latencies = run_once(Path(tmp) / "tail.ss", count, pace_ms)
                p50s.append(percentile(latencies, 0.50))
                p99s.append(percentile(latencies, 0.99))
            p50, p99 = statistics.median(p50s), statistics.median(p99s)
            print(
                f"{pace_ms:5.0f} ms {count:8d}   {p50:6.3f} (x{p50 / AIM_P50_MS:4.2f}, "
                f"x{p50 / RUST_P50_MS:4.2f})       {p99:6.3f} (x{p99 / AIM_P99_MS:4.2f}, "
                f"x{p99 / RUST_P99_MS:4.2f})     "
                + ", ".join(f"{a:.3f}/{b:.3f}" for a, b in zip(p50s, p99s, strict=True))
            )


if __name__ == "__main__":
    main()
