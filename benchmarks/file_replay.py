"""Replaying 1M messages of 100 bytes from a stream file through the framework to a no-op handler.

An app with a ``FileBroker`` and a ``FileStream("bench").replay()`` subscription, handler
``async def handle(payload: bytes) -> None``, timed from ``serve`` to the app stopping by itself
at the end of the replay. Two settings: the defaults (64 messages per read, a channel sized to
one read: 64) and a larger read and channel (256 and 256).

Prints medians of several runs, with ratios against the peer measured in the same run: the
stream-file library alone (``FileSource.read_available``, no framework), the limit the framework
can only approach. Then the aim (the defaults at 0.45 of the library alone or more) and the
upstream Rust high-level consumer's figure, as a reference.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import REFERENCE_CONSUMER, median_rate, parse_args, reference, row
from file_read import read_trio
from file_write import write_file

from trio_streams import App
from trio_streams.file import FileBroker, FileStream

#: The aim: with the defaults, at least this share of what the library alone reads.
AIM_RATIO = 0.45
LIMIT = "library alone"


def replay_through_the_app(path: Path, count: int, buffer: int | None) -> int:
    app = App("bench")
    broker = app.broker(FileBroker(path, existing_only=True))
    handled = 0

    @broker.subscriber(FileStream("bench").replay(), count=count, buffer=buffer)
    async def handle(payload: bytes) -> None:
        nonlocal handled
        handled += 1

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()

    trio.run(run)
    return handled


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "bench.ss"
        started = time.perf_counter()
        write_file(path, args.messages)
        print(
            f"{args.messages} messages of 100 bytes written in "
            f"{time.perf_counter() - started:.1f} s; {args.repeats} rounds of every contender, "
            "medians"
        )
        contenders: list[tuple[str, Callable[[], int]]] = [
            ("library alone (the limit, peer)", lambda: read_trio(path)),
            ("app, defaults (64 / 64)", partial(replay_through_the_app, path, 64, None)),
            ("app, count=256 buffer=256", partial(replay_through_the_app, path, 256, 256)),
        ]
        # Round after round, every contender once, so a disturbance of the machine hits them
        # all; the ratio of each round is against the peer of the same round.
        rates: dict[str, list[float]] = {name: [] for name, _ in contenders}
        for _ in range(args.repeats):
            for name, run in contenders:
                rates[name].append(median_rate(run, 1)[0])
        peer_rates = rates[contenders[0][0]]
        limit = statistics.median(peer_rates)
        ratios: dict[str, float] = {}
        for name, _ in contenders:
            rate = statistics.median(rates[name])
            ratios[name] = statistics.median(
                r / p for r, p in zip(rates[name], peer_rates, strict=True)
            )
            print(
                row(name, rate, peer=limit, peer_name=LIMIT)
                + f"   median of per-round ratios x{ratios[name]:.2f}; runs: "
                + ", ".join(f"{r / 1000:.0f}k" for r in rates[name])
            )
        ratio = ratios[contenders[1][0]]
        met = "met" if ratio >= AIM_RATIO else "NOT met"
        print(f"aim: defaults >= x{AIM_RATIO:.2f} of the library alone ({met}: x{ratio:.2f})")
        print(
            reference(
                "Rust high-level consumer replay", f"~{REFERENCE_CONSUMER / 1000:.0f}k msgs/s"
            )
        )


if __name__ == "__main__":
    main()
