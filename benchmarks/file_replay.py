"""Replaying 1M messages of 100 bytes from a stream file through the framework to a handler.

An app with a ``FileBroker`` and a ``FileStream("bench").replay()`` subscription, timed from
``serve`` to the app stopping by itself at the end of the replay, with two handlers:

- no-op: ``async def handle(payload: bytes) -> None``, with the defaults (64 messages per read,
  a channel sized to one read: 64) and with a larger read and channel (256 and 256);
- JSON to a dataclass: ``async def handle(order: Order) -> None`` on a file of the same count
  of JSON documents of about 100 bytes, with the defaults.

Two peers, measured in the same run, round after round with every contender:

- the stream-file library alone (``FileSource.read_available``, no framework, no handler): the
  limit the framework can only approach;
- a minimal read-per-channel-item design: the same ``FileSource`` reads 64 messages at a time
  into a Trio memory channel (one read per item, room for one), and one task awaits the same
  handler on each message's payload (decoded by a ``msgspec`` decoder of the dataclass, for
  JSON). What a dispatcher with no promises (no seeks, no outcomes, no retries, no shutdown
  drain) would cost.

Prints medians of the rounds and the median of the per-round ratios of each contender to both
peers, then the aims: the defaults at 0.7 of the library alone or more, and at 0.95 of the
minimal design or more (no-op and JSON each against the minimal design with the same handler).
Then the upstream Rust high-level consumer's figure, as a reference.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import msgspec
import trio

sys.path.insert(0, str(Path(__file__).parent))

from _common import REFERENCE_CONSUMER, median_rate, parse_args, reference, row
from file_read import read_trio
from file_write import T0, write_file

from trio_streams import App
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.follower import FileSource
from trio_streams.file.format import Message
from trio_streams.file.writer import StreamWriter

#: The aims: with the defaults, at least these shares of the library alone and of the minimal
#: design (each handler against the minimal design with the same handler).
AIM_RATIO = 0.7
AIM_MINIMAL_RATIO = 0.95
LIMIT = "library alone"
#: Messages per read of the minimal design: the app's default.
MINIMAL_READ = 64


@dataclass
class Order:
    id: int
    customer: str
    amount: float


def json_payload(i: int) -> bytes:
    """A JSON document of about 100 bytes."""
    note = "n" * 40
    return (
        f'{{"id":{i},"customer":"customer-{i % 1000:04d}","amount":99.5,"note":"{note}"}}'.encode()
    )


def write_json_file(path: Path, count: int) -> None:
    writer = StreamWriter(path, durability="close")
    append = writer.append
    for i in range(count):
        append("bench", json_payload(i), T0 + i)
        if i % 1000 == 999:
            writer.flush()
    writer.close()


def replay_through_the_app(
    path: Path, count: int, buffer: int | None, *, as_json: bool = False
) -> int:
    app = App("bench")
    broker = app.broker(FileBroker(path, existing_only=True))
    handled = 0
    subscriber = broker.subscriber(FileStream("bench").replay(), count=count, buffer=buffer)
    if as_json:

        @subscriber
        async def handle_json(order: Order) -> None:
            nonlocal handled
            handled += 1

    else:

        @subscriber
        async def handle(payload: bytes) -> None:
            nonlocal handled
            handled += 1

    async def run() -> None:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()

    trio.run(run)
    return handled


def minimal_design(path: Path, *, as_json: bool = False) -> int:
    """The peer: one read per channel item, one task awaiting the handler on each message."""
    handled = 0

    async def handle(payload: bytes) -> None:
        nonlocal handled
        handled += 1

    async def handle_json(order: Order) -> None:
        nonlocal handled
        handled += 1

    decode = msgspec.json.Decoder(Order).decode

    async def run() -> None:
        send, receive = trio.open_memory_channel[list[Message]](1)

        async def read() -> None:
            async with send:
                source = await FileSource.open(path, mode="replay", keys=["bench"])
                async with source:
                    while True:
                        batch = source.read_available(MINIMAL_READ)
                        if batch:
                            await send.send(batch)
                        elif source.ended:
                            return
                        else:
                            await source.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(read)
            async with receive:
                async for batch in receive:
                    if as_json:
                        for message in batch:
                            await handle_json(decode(message.payload))
                    else:
                        for message in batch:
                            await handle(message.payload)

    trio.run(run)
    return handled


def main() -> None:
    args = parse_args(__doc__)
    with tempfile.TemporaryDirectory() as tmp:
        path, json_path = Path(tmp) / "bench.ss", Path(tmp) / "json.ss"
        started = time.perf_counter()
        write_file(path, args.messages)
        write_json_file(json_path, args.messages)
        print(
            f"{args.messages} messages of 100 bytes (and as many JSON documents) written in "
            f"{time.perf_counter() - started:.1f} s; {args.repeats} rounds of every contender, "
            "medians"
        )
        peer, minimal, minimal_json = (
            "library alone (the limit, peer)",
            "minimal design, no-op (peer)",
            "minimal design, JSON (peer)",
        )
        defaults, json = "app, defaults (64 / 64), no-op", "app, defaults, JSON -> dataclass"
        contenders: list[tuple[str, Callable[[], int]]] = [
            (peer, lambda: read_trio(path)),
            (minimal, partial(minimal_design, path)),
            (defaults, partial(replay_through_the_app, path, 64, None)),
            ("app, count=256 buffer=256, no-op", partial(replay_through_the_app, path, 256, 256)),
            (minimal_json, partial(minimal_design, json_path, as_json=True)),
            (json, partial(replay_through_the_app, json_path, 64, None, as_json=True)),
        ]
        # Round after round, every contender once, so a disturbance of the machine hits them
        # all; the ratio of each round is against the peer of the same round.
        rates: dict[str, list[float]] = {name: [] for name, _ in contenders}
        for _ in range(args.repeats):
            for name, run in contenders:
                rates[name].append(median_rate(run, 1)[0])

        def ratio(name: str, to: str) -> float:
            pairs = zip(rates[name], rates[to], strict=True)
            return statistics.median(r / p for r, p in pairs)

        limit = statistics.median(rates[peer])
        for name, _ in contenders:
            print(
                row(name, statistics.median(rates[name]), peer=limit, peer_name=LIMIT)
                + f"   per round: x{ratio(name, peer):.2f} of {LIMIT}, "
                + f"x{ratio(name, minimal_json if 'JSON' in name else minimal):.2f} of the "
                + "minimal design; runs: "
                + ", ".join(f"{r / 1000:.0f}k" for r in rates[name])
            )
        for name, to, aim in (
            (defaults, peer, AIM_RATIO),
            (defaults, minimal, AIM_MINIMAL_RATIO),
            (json, minimal_json, AIM_MINIMAL_RATIO),
        ):
            got = ratio(name, to)
            met = "met" if got >= aim else "NOT met"
            print(f"aim: {name} >= x{aim:.2f} of {to} ({met}: x{got:.2f})")
        print(
            reference(
                "Rust high-level consumer replay", f"~{REFERENCE_CONSUMER / 1000:.0f}k msgs/s"
            )
        )


if __name__ == "__main__":
    main()
