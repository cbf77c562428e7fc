"""Shared helpers of the stream-file benchmarks: medians of repeated runs, formatted rows."""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable

import trio

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


def latency_options(
    description: str | None,
    reader: Callable[[str, int], Awaitable[None]],
    writer: Callable[[str, int, float], Awaitable[None]],
) -> argparse.Namespace | None:
    """Parse a latency benchmark's options. Run as ``--role reader|writer`` (a subprocess the
    benchmark started), play that role and return None; otherwise return the options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--role", choices=("reader", "writer"))
    parser.add_argument("args", nargs="*")
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    if options.role == "reader":
        trio.run(reader, options.args[0], int(options.args[1]))
        return None
    if options.role == "writer":
        trio.run(writer, options.args[0], int(options.args[1]), float(options.args[2]))
        return None
    return options
