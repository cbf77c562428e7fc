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

With the ``prometheus`` and ``otel`` extras installed it also runs JSON into a dataclass with the
metrics middleware (``PrometheusMiddleware``, a registry of its own) and with the tracing
middleware (``TracingMiddleware`` on the OpenTelemetry SDK, spans recorded and not exported),
each against the same case without middlewares in the same round, with the aim for metrics: a
cost under 15% of the no-op handler's throughput (a ratio of 0.85 or more).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated

import trio

from trio_streams import App, Depends, MemoryBroker, MemoryStream, Middleware

CAPACITY = 64
#: The aim: JSON -> dataclass at least this share of the raw-bytes rate of the same run.
AIM_JSON_RATIO = 0.8
#: The aim: with the metrics middleware, at least this share of the rate without it.
AIM_METRICS_RATIO = 0.85


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


def middlewares_for(kind: str) -> list[Middleware]:
    if kind == "metrics":
        from prometheus_client import CollectorRegistry

        from trio_streams.integrations.prometheus import PrometheusMiddleware

        return [PrometheusMiddleware(registry=CollectorRegistry())]
    if kind == "tracing":
        from opentelemetry.sdk.trace import TracerProvider

        from trio_streams.integrations.otel import TracingMiddleware

        return [TracingMiddleware(tracer_provider=TracerProvider())]
    return []


def make_app(kind: str, workers: int, n: int, done: trio.Event) -> tuple[App, MemoryBroker]:
    middlewares = middlewares_for(kind)
    if middlewares:
        kind = "json"
    app = App("bench", middlewares=middlewares)
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

    kinds = [("raw", "raw bytes"), ("json", "JSON -> dataclass"), ("depends", "JSON + 2 Depends")]
    extras = [("metrics", "JSON + metrics"), ("tracing", "JSON + tracing")]
    for kind, label in extras:
        try:
            middlewares_for(kind)
        except ImportError:
            print(f"{label}: skipped (pip install 'trio-streams[prometheus,otel]' and the SDK)")
        else:
            kinds.append((kind, label))
    cases = [(kind, label, workers) for kind, label in kinds for workers in (1, 8)]
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
    for kind, label in extras:
        if (kind, 1) not in rates:
            continue
        for workers in (1, 8):
            pairs = zip(rates[kind, workers], rates["json", workers], strict=True)
            ratio = statistics.median(m / j for m, j in pairs)
            if kind == "metrics":
                met = "met" if ratio >= AIM_METRICS_RATIO else "NOT met"
                aim = f"aim >= x{AIM_METRICS_RATIO:.2f}, {met}"
            else:
                aim = "no aim"
            print(
                f"{label} / JSON -> dataclass, workers={workers}: x{ratio:.2f} "
                f"(cost {1 - ratio:.0%}; {aim}; median of per-round ratios)"
            )


if __name__ == "__main__":
    main()
