"""Shared helpers of the stream-file benchmarks: medians of repeated runs, formatted rows."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

MESSAGES = 1_000_000
PAYLOAD = bytes(range(100))


def median_rate(run: Callable[[], int], repeats: int) -> tuple[float, list[float]]:
    """Run ``run`` (returning how many messages it handled) ``repeats`` times; msgs/s median."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        count = run()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates), rates


def row(name: str, rate: float, *, peer: float, aim: float) -> str:
    return (
        f"{name:<34} {rate / 1000:8.1f}k msgs/s   x{rate / peer:5.2f} vs Rust peer "
        f"({peer / 1000:.0f}k)   x{rate / aim:5.2f} vs aim ({aim / 1000:.0f}k)"
    )


def parse_args(description: str | None) -> argparse.Namespace:
    """The options every throughput benchmark takes: how many messages, how many runs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args()
