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

import sys
import tempfile
import time
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
            f"{time.perf_counter() - started:.1f} s; {args.repeats} runs each, medians"
        )
        limit, _ = median_rate(lambda: read_trio(path), args.repeats)
        print(row("library alone (the limit, peer)", limit, peer=limit, peer_name=LIMIT))
        defaults = 0.0
        for label, count, buffer in (
            ("app, defaults (64 / 64)", 64, None),
            ("app, count=256 buffer=256", 256, 256),
        ):
            run = partial(replay_through_the_app, path, count, buffer)
            rate, rates = median_rate(run, args.repeats)
            if count == 64:
                defaults = rate
            print(
                row(label, rate, peer=limit, peer_name=LIMIT)
                + "   runs: "
                + ", ".join(f"{r / 1000:.0f}k" for r in rates)
            )
        ratio = defaults / limit
        met = "met" if ratio >= AIM_RATIO else "NOT met"
        print(f"aim: defaults >= x{AIM_RATIO:.2f} of the library alone ({met}: x{ratio:.2f})")
        print(
            reference(
                "Rust high-level consumer replay", f"~{REFERENCE_CONSUMER / 1000:.0f}k msgs/s"
            )
        )


if __name__ == "__main__":
    main()
