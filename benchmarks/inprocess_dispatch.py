"""Messages per second from publish to settled on the in-process transport, no-op handler.

Cases: raw bytes and JSON into a dataclass, with workers=1 and workers=8, and JSON into a
dataclass with two dependencies (a function and an async generator with a cleanup, the cost of
``Depends`` per delivery). The peer, measured in
the same run, is a bare Trio loop: a producer sending into a ``trio.open_memory_channel`` of the
same capacity and a consumer awaiting a no-op per item — the floor any Trio dispatcher pays.
Every round runs the peer and every case once; prints medians of the rounds, the ratio to the
peer (the median of the per-round ratios), and, for each worker count, JSON
into a dataclass against raw bytes of the same run, with the aim (0.8 or more): what decoding a
typed payload costs on top of dispatching it.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import trio

from trio_streams import App, Depends, MemoryBroker, MemoryStream

CAPACITY = 64
#: The aim: JSON -> dataclass at least this share of the raw-bytes rate of the same run.
AIM_JSON_RATIO = 0.8


@dataclass
class Order:
    id: int
    customer: str
    amount: float


def customer(order: Order) -> str:
    return order.customer


async def session() -> AsyncIterator[int]:
    yield 1


async def bare_channel(n: int) -> float:
    send, receive = trio.open_memory_channel[bytes](CAPACITY)

    async def noop(item: bytes) -> None:
        return None

    async def produce() -> None:
        async with send:
            for _ in range(n):
                await send.send(b"x" * 100)

    start = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(produce)
        async with receive:
            async for item in receive:
                await noop(item)
    return n / (time.perf_counter() - start)


def make_app(kind: str, workers: int, n: int, done: trio.Event) -> tuple[App, MemoryBroker]:
    app = App("bench")
    broker = app.broker(MemoryBroker(max_len=n + 1))
    count = 0

    def seen() -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    if kind == "raw":

        @broker.subscriber(MemoryStream("bench"), workers=workers, buffer=CAPACITY)
        async def handle_raw(payload: bytes) -> None:
            seen()

    elif kind == "json":

        @broker.subscriber(MemoryStream("bench"), workers=workers, buffer=CAPACITY)
        async def handle_json(order: Order) -> None:
            seen()

    else:

        @broker.subscriber(MemoryStream("bench"), workers=workers, buffer=CAPACITY)
        async def handle_depends(
            order: Order,
            who: Annotated[str, Depends(customer)],
            db: Annotated[int, Depends(session)],
        ) -> None:
            seen()

    return app, broker


async def framework(kind: str, workers: int, n: int) -> float:
    done = trio.Event()
    app, broker = make_app(kind, workers, n, done)
    payload = (
        b"x" * 100
        if kind == "raw"
        else b'{"id":12345,"customer":"customer-0042","amount":99.5,"note":"' + b"n" * 30 + b'"}'
    )
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        transport = broker.transport
        start = time.perf_counter()
        for _ in range(n):
            await transport.publish("bench", payload, {})
        await done.wait()
        elapsed = time.perf_counter() - start
        await running.aclose()
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=100_000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    n = args.n

    cases = [
        (kind, label, workers)
        for kind, label in (
            ("raw", "raw bytes"),
            ("json", "JSON -> dataclass"),
            ("depends", "JSON + 2 Depends"),
        )
        for workers in (1, 8)
    ]
    # Round after round, every case once, so a disturbance of the machine hits them all; the
    # ratios are medians of the ratios within each round.
    peers: list[float] = []
    rates: dict[tuple[str, int], list[float]] = {(k, w): [] for k, _, w in cases}
    for _ in range(args.rounds):
        peers.append(trio.run(bare_channel, n))
        for kind, _, workers in cases:
            rates[kind, workers].append(trio.run(framework, kind, workers, n))
    peer = statistics.median(peers)
    print(f"bare trio memory channel loop: {peer:>10,.0f} msgs/s (peer)")
    for kind, label, workers in cases:
        rate = statistics.median(rates[kind, workers])
        ratio = statistics.median(r / p for r, p in zip(rates[kind, workers], peers, strict=True))
        print(f"{label:<18} workers={workers}: {rate:>10,.0f} msgs/s  ratio to peer {ratio:.2f}")
    for workers in (1, 8):
        pairs = zip(rates["json", workers], rates["raw", workers], strict=True)
        ratio = statistics.median(j / r for j, r in pairs)
        met = "met" if ratio >= AIM_JSON_RATIO else "NOT met"
        print(
            f"aim: JSON -> dataclass >= x{AIM_JSON_RATIO:.2f} of raw bytes, workers={workers} "
            f"({met}: x{ratio:.2f}, median of per-round ratios)"
        )


if __name__ == "__main__":
    main()
