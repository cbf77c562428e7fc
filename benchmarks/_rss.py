"""Peak RSS of a process draining a backlog: samples, the peak, and the curve over the drain.

Shared by the backlog benchmarks (``redis_backlog_rss.py``, ``file_backlog_rss.py``,
``inprocess_backlog_rss.py``): each drains in a process of its own, samples its own RSS
(``VmRSS`` in ``/proc/self/status``, Linux) every ``interval`` seconds while it drains and reports
its peak (``VmHWM``), its RSS before it started reading and the RSS at each tenth of the drain.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import trio

#: The aim: a 1M-message backlog drained with a slow handler peaks under this, on every transport.
AIM_PEAK_MB = 100.0


def memory_mb() -> tuple[float, float]:
    """This process's ``(VmRSS, VmHWM)`` in MB."""
    values: dict[str, float] = {}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, rest = line.partition(":")
            if name in ("VmRSS", "VmHWM"):
                values[name] = int(rest.split()[0]) / 1024
    return values["VmRSS"], values["VmHWM"]


class Sampler:
    """RSS every ``interval`` seconds while the drain runs; the curve at each tenth of it."""

    def __init__(self, entries: int, interval: float) -> None:
        self.entries = entries
        self.interval = interval
        self.done = 0
        self.peak_sampled = 0.0
        self.curve: list[tuple[int, float, float]] = []  # (percent drained, seconds, MB)
        self._next_tenth = 0
        self._started = time.monotonic()

    def start(self) -> None:
        self._started = time.monotonic()

    async def run(self) -> None:
        while True:
            self.sample()
            await trio.sleep(self.interval)

    def sample(self) -> None:
        rss, _ = memory_mb()
        self.peak_sampled = max(self.peak_sampled, rss)
        while self._next_tenth <= 10 and self.done * 10 >= self._next_tenth * self.entries:
            elapsed = time.monotonic() - self._started
            self.curve.append((self._next_tenth * 10, elapsed, rss))
            self._next_tenth += 1

    def report(self, before: float, elapsed: float) -> dict[str, Any]:
        self.sample()
        _, hwm = memory_mb()
        return {
            "before_mb": before,
            "peak_mb": hwm,
            "peak_sampled_mb": self.peak_sampled,
            "handled": self.done,
            "seconds": elapsed,
            "curve": self.curve,
        }


def verdict(peak_mb: float) -> str:
    """The aim next to a measured peak."""
    met = "met" if peak_mb < AIM_PEAK_MB else "NOT met"
    return f"aim: peak RSS < {AIM_PEAK_MB:.0f} MB ({met}: {peak_mb:.1f} MB)"


def run_drain_process(script: str, args: Any, contender: str, *target: str) -> dict[str, Any]:
    """Run ``script --drain CONTENDER [TARGET]`` in a fresh process (its own peak RSS) with
    the run's sizes; the report it prints last, as JSON."""
    command = [
        sys.executable, script, "--drain", contender, *target, "--entries", str(args.entries),
        "--workers", str(args.workers), "--sleep", str(args.sleep), "--sample", str(args.sample),
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def show_drain(
    contender: str, result: dict[str, Any], entries: int, memory: str, extra: str = ""
) -> None:
    """Three lines on one drain: rate, the RSS figures (``memory``, already worded), the curve."""
    rate = result["handled"] / result["seconds"]
    print(
        f"{contender:>9}: handled {result['handled']} of {entries} in {result['seconds']:.1f} s "
        f"({rate:.0f} msgs/s){extra}"
    )
    print(f"{'':>9}  {memory}")
    curve = ", ".join(f"{pct}% {mb:.1f}" for pct, _, mb in result["curve"])
    print(f"{'':>9}  RSS (MB) by share drained: {curve}")


def compare_peaks(results: dict[str, dict[str, Any]]) -> None:
    """The framework's peak against the raw reader's, same run, and the aim."""
    framework, raw = results["framework"], results["raw"]
    print(
        f"peak RSS framework / raw: {framework['peak_mb'] / raw['peak_mb']:.2f} "
        f"({framework['peak_mb']:.1f} MB / {raw['peak_mb']:.1f} MB, same run); framework peak "
        f"over its own RSS before reading: +{framework['peak_mb'] - framework['before_mb']:.1f} MB"
    )
    print(verdict(framework["peak_mb"]))


def reading_memory(result: dict[str, Any]) -> str:
    """The RSS figures of a drain that read its backlog from outside the process."""
    return (
        f"RSS before reading {result['before_mb']:.1f} MB, peak {result['peak_mb']:.1f} MB "
        f"(VmHWM; sampled peak {result['peak_sampled_mb']:.1f} MB)"
    )
