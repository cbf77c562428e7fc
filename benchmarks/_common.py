"""Shared helpers of the stream-file benchmarks: medians of repeated runs, formatted rows.

Every ratio a benchmark prints is against a peer it measured in the same run, on the same
machine and the same data. Figures measured elsewhere (:data:`REFERENCE`) are printed as
references, with their source and date, never divided by.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from trio_streams.testing.binaries import SERVER_ENV, server_build

MESSAGES = 1_000_000
PAYLOAD = bytes(range(100))

#: Where and when the reference figures were measured: by the same upstream tools on this
#: machine class, not by these scripts.
REFERENCE_SOURCE = (
    "upstream sea-streamer-file 1.0.0-rc.2, measured on this machine class (2 shared cores), "
    "2026-12"
)
#: The reference figures of REFERENCE_SOURCE: the Rust reader (CRC checked) and the high-level
#: consumer replaying 1M x 100 B (msgs/s), the follower's latency p50 in ms per writer pacing
#: in ms.
REFERENCE_READER = 199_000
REFERENCE_CONSUMER = 116_000
REFERENCE_TAIL_P50_MS = {5.0: 0.38, 200.0: 0.44}
#: A figure quoted from an earlier measurement and not repeated in REFERENCE_SOURCE's run.
QUOTED_SOURCE = (
    "upstream sea-streamer-file 1.0.0-rc.2, measured on this machine class (2 shared cores), "
    "2026-11; not repeated in 2026-12"
)
#: The Rust writer (msgs/s), from QUOTED_SOURCE.
REFERENCE_WRITER = 550_000


def median_rate(run: Callable[[], int], repeats: int) -> tuple[float, list[float]]:
    """Run ``run`` (returning how many messages it handled) ``repeats`` times; msgs/s median."""
    rates = []
    for _ in range(repeats):
        start = time.perf_counter()
        count = run()
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates), rates


def interleaved_rates(
    contenders: dict[str, Callable[[], int]], rounds: int
) -> dict[str, list[float]]:
    """Each contender (returning how many messages it handled) run once per round, in turns, for
    ``rounds`` rounds; every run's msgs/s, by contender. Interleaving makes a disturbance of the
    shared machine hit every contender alike: compare their medians."""
    rates: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(rounds):
        for name, run in contenders.items():
            start = time.perf_counter()
            count = run()
            rates[name].append(count / (time.perf_counter() - start))
    return rates


def row(name: str, rate: float, *, peer: float, peer_name: str) -> str:
    """A throughput and its ratio to ``peer``, a rate measured in the same run."""
    return (
        f"{name:<34} {rate / 1000:8.1f}k msgs/s   x{rate / peer:5.2f} vs {peer_name} "
        f"({peer / 1000:.0f}k, same run)"
    )


def reference(what: str, figure: str, source: str = REFERENCE_SOURCE) -> str:
    """A line stating a reference figure: what it is, the figure, where and when it was
    measured. Never divided by: a reference is not a peer of the run."""
    return f"reference (not a peer; {source}): {what} {figure}"


def parse_args(description: str | None) -> argparse.Namespace:
    """The options every throughput benchmark takes: how many messages, how many runs."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--messages", type=int, default=MESSAGES)
    parser.add_argument("--repeats", type=int, default=5)
    return parser.parse_args()


def redis_drain_args(description: str | None) -> argparse.Namespace:
    """The options of the Redis drain benchmarks: entries per run (every contender, the
    FastStream peer included, drains that many), runs, the server, and the FastStream peer's
    interpreter (``faststream[redis]`` 0.7.0 and ``hiredis``, checked before anything runs:
    see ``_redis_peers.py``).

    ``--server NAME|PATH`` chooses the server binary as the tests do (it sets
    ``TRIO_STREAMS_REDIS_SERVER``: a path, or a server of the matrix, ``redis-8.2``, installed
    by ``python -m tests.server_matrix install``); by default the one that variable names, else
    the ``redis-server`` on ``PATH``."""
    from _redis_peers import checked_faststream_python

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--entries", type=int, default=50_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--server", metavar="NAME|PATH", default=None)
    parser.add_argument("--faststream-python", metavar="PATH", default=None)
    args = parser.parse_args()
    if args.server is not None:
        os.environ[SERVER_ENV] = args.server
    print(f"server: {server_build().label}")
    args.faststream_python = checked_faststream_python(args.faststream_python)
    return args


def latency_options(
    description: str | None,
    reader: Callable[[str, int], Awaitable[None]],
    writer: Callable[[str, int, float], Awaitable[None]],
    poller: Callable[[str, int], None] | None = None,
) -> argparse.Namespace | None:
    """Parse a latency benchmark's options. Run as ``--role reader|writer|poller`` (a subprocess
    the benchmark started), play that role and return None; otherwise return the options.

    ``--messages N`` caps the messages per pacing (for a short check run)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--role", choices=("reader", "writer", "poller"))
    parser.add_argument("args", nargs="*")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--messages", type=int, default=None, help="cap per pacing")
    options = parser.parse_args()
    if options.role == "reader":
        trio.run(reader, options.args[0], int(options.args[1]))
        return None
    if options.role == "writer":
        trio.run(writer, options.args[0], int(options.args[1]), float(options.args[2]))
        return None
    if options.role == "poller":
        assert poller is not None, "this benchmark has no poller role"
        poller(options.args[0], int(options.args[1]))
        return None
    return options


def capped(options: Any, count: int) -> int:
    """``count``, or fewer if the options cap the messages per pacing."""
    cap: int | None = options.messages
    return count if cap is None else min(cap, count)
