"""Write-to-read latency of a live follower: a writer process and a following reader process.

The writer appends one message (its payload: the wall-clock ns just before ``append``) and
flushes, every 5 ms or 200 ms; the reader, a live ``FileSource`` in another process woken by
inotify, notes the wall-clock ns when ``read_available`` hands the message over. The peer,
measured in the same run and the same way: a process busy-polling the tail with the library's
sync ``FileReader`` (no wake-up to wait for, one CPU burnt), the floor a follower can approach.
The two take turns, round by round. Prints p50/p99 (medians over rounds) and their ratios to the
peer's, the aim (the follower's p50 at 5 ms spacing ≤ 0.2 ms), the upstream Rust follower's p50
as a reference, and the CPU the follower uses while the file stays quiet (it must stay near 0:
no busy loop bought for latency).
"""

from __future__ import annotations

import json
import os
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

#: The library follower's p50 at 5 ms spacing, in ms.
AIM_LIBRARY_P50_MS = 0.2
PACINGS = ((5.0, 400), (200.0, 60))
#: Seconds of quiet over which the idle follower's CPU is measured.
IDLE_SECONDS = 10.0

Run = Callable[[Path, int, float], list[float]]


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


def _follow(path: Path, count: int, script: str, role: str) -> subprocess.Popen[str]:
    """A fresh file and ``script --role ROLE`` following it, once it says it is ready."""
    StreamWriter(path).close()
    follower = subprocess.Popen(
        [sys.executable, script, "--role", role, str(path), str(count)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert follower.stdout is not None
    assert follower.stdout.readline().strip() == "ready"
    return follower


def run_once(
    path: Path, count: int, pace_ms: float, script: str = __file__, role: str = "reader"
) -> list[float]:
    """A fresh file, ``script --role ROLE`` following it and ``script --role writer`` writing
    ``count`` messages ``pace_ms`` apart; returns the follower's latencies in ms."""
    follower = _follow(path, count, script, role)
    subprocess.run(
        [sys.executable, script, "--role", "writer", str(path), str(count), str(pace_ms)],
        check=True,
    )
    assert follower.stdout is not None
    latencies: list[float] = json.loads(follower.stdout.readline())
    follower.wait(timeout=30)
    path.unlink()
    return latencies


def _cpu_seconds(pid: int) -> float:
    """User plus system CPU time a process has used so far (from ``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def idle_cpu(path: Path, seconds: float, script: str = __file__, role: str = "reader") -> float:
    """The CPU share (of one core) a ``script --role ROLE`` follower uses over ``seconds`` of a
    quiet file, from 1 s after it is ready (past its first, fast polls); one message written
    afterwards ends it."""
    follower = _follow(path, 1, script, role)
    time.sleep(1.0)
    cpu, wall = _cpu_seconds(follower.pid), time.monotonic()
    time.sleep(seconds)
    used, elapsed = _cpu_seconds(follower.pid) - cpu, time.monotonic() - wall
    with StreamWriter(path) as out:
        out.append("tick", b"%d" % time.time_ns())
    assert follower.stdout is not None
    follower.stdout.readline()
    follower.wait(timeout=30)
    path.unlink()
    return used / elapsed


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def poll_once(path: Path, count: int, pace_ms: float) -> list[float]:
    return run_once(path, count, pace_ms, role="poller")


def interleaved(
    contenders: dict[str, Run], path: Path, count: int, pace_ms: float, repeats: int
) -> dict[str, tuple[float, float, str]]:
    """Each contender once per round, in turn, for ``repeats`` rounds: the median over rounds
    of each one's p50 and p99, and its rounds' figures."""
    figures: dict[str, list[tuple[float, float]]] = {who: [] for who in contenders}
    for _ in range(repeats):
        for who, run in contenders.items():
            latencies = run(path, count, pace_ms)
            figures[who].append((percentile(latencies, 0.50), percentile(latencies, 0.99)))
    return {
        who: (
            statistics.median(p50 for p50, _ in rounds),
            statistics.median(p99 for _, p99 in rounds),
            ", ".join(f"{p50:.3f}/{p99:.3f}" for p50, p99 in rounds),
        )
        for who, rounds in figures.items()
    }


def idle_options() -> float:
    """``--idle-seconds S`` (default :data:`IDLE_SECONDS`), taken out of ``sys.argv`` before
    the common options are parsed."""
    seconds = IDLE_SECONDS
    if "--idle-seconds" in sys.argv:
        at = sys.argv.index("--idle-seconds")
        seconds = float(sys.argv[at + 1])
        del sys.argv[at : at + 2]
    return seconds


def main() -> None:
    idle_seconds = idle_options()
    options = latency_options(__doc__, reader, writer, poller)
    if options is None:
        return
    print(
        f"{options.repeats} rounds, the contenders taking turns in each; p50/p99 are medians "
        "over rounds"
    )
    print(
        "pacing   messages  who                  p50 ms (x peer)   p99 ms (x peer)   rounds p50/p99"
    )
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tail.ss"
        for pace_ms, count in PACINGS:
            count = capped(options, count)
            results = interleaved(
                {"busy poll (peer)": poll_once, "FileSource (inotify)": run_once},
                path,
                count,
                pace_ms,
                options.repeats,
            )
            peer50, peer99, _ = results["busy poll (peer)"]
            for who, (p50, p99, rounds) in results.items():
                print(
                    f"{pace_ms:5.0f} ms {count:8d}  {who:<20} {p50:6.3f} (x{p50 / peer50:4.2f})   "
                    f"{p99:6.3f} (x{p99 / peer99:4.2f})   {rounds}"
                )
            p50 = results["FileSource (inotify)"][0]
            if pace_ms == 5.0:
                met = "met" if p50 <= AIM_LIBRARY_P50_MS else "NOT met"
                print(f"         aim: FileSource p50 <= {AIM_LIBRARY_P50_MS} ms: {met}")
            print(
                "         " + reference("Rust follower p50", f"{REFERENCE_TAIL_P50_MS[pace_ms]} ms")
            )
        share = idle_cpu(path, idle_seconds)
        print(
            f"idle: a FileSource following a quiet file uses {share * 100:.2f} % of a core "
            f"({idle_seconds:.0f} s measured)"
        )


if __name__ == "__main__":
    main()
