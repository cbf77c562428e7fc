"""What ``Depends`` costs per delivery: a JSON handler with and without two dependencies.

In process, publish -> JSON -> dataclass -> a handler that does nothing, one worker, as
``inprocess_dispatch.py`` measures it. Four handlers, each mounted alone in an app of its own:

- no dependency (the peer);
- two plain dependencies, both functions of the payload (``def``);
- two plain dependencies, a ``def`` and an ``async def``;
- two generator dependencies, a generator and an async generator, each with a cleanup after
  its ``yield`` (they need a scope per delivery: their cleanups run once it is settled).

Every round runs each case once, in turn, so a disturbance of the machine hits them all;
prints the medians of the rounds and, for each case, the median of its per-round ratios to the
handler without dependencies, with the aim: two plain dependencies at 0.7 of it or more.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Annotated

import trio

from trio_streams import App, Depends, MemoryBroker, MemoryStream

CAPACITY = 64
#: The aim: two plain dependencies at least this share of the rate without them.
AIM_PLAIN_RATIO = 0.7
PAYLOAD = b'{"id":12345,"customer":"customer-0042","amount":99.5,"note":"' + b"n" * 30 + b'"}'


@dataclass
class Order:
    id: int
    customer: str
    amount: float


def customer(order: Order) -> str:
    return order.customer


def amount(order: Order) -> float:
    return order.amount


async def account(order: Order) -> int:
    return order.id


def opened() -> Iterator[int]:
    yield 1


async def session() -> AsyncIterator[int]:
    yield 1


CASES = {
    "none": "no dependency (peer)",
    "plain": "2 plain: def + def",
    "plain_async": "2 plain: def + async def",
    "generators": "2 generators: gen + async gen",
}


def make_app(case: str, n: int, done: trio.Event) -> tuple[App, MemoryBroker]:
    app = App("bench")
    broker = app.broker(MemoryBroker(max_len=n + 1))
    count = 0

    def seen() -> None:
        nonlocal count
        count += 1
        if count == n:
            done.set()

    subscriber = broker.subscriber(MemoryStream("bench"), buffer=CAPACITY)
    if case == "none":

        @subscriber
        async def handle(order: Order) -> None:
            seen()

    elif case == "plain":

        @subscriber
        async def handle_plain(
            order: Order,
            who: Annotated[str, Depends(customer)],
            much: Annotated[float, Depends(amount)],
        ) -> None:
            seen()

    elif case == "plain_async":

        @subscriber
        async def handle_plain_async(
            order: Order,
            who: Annotated[str, Depends(customer)],
            number: Annotated[int, Depends(account)],
        ) -> None:
            seen()

    else:

        @subscriber
        async def handle_generators(
            order: Order,
            handle: Annotated[int, Depends(opened)],
            db: Annotated[int, Depends(session)],
        ) -> None:
            seen()

    return app, broker


async def run_case(case: str, n: int) -> float:
    done = trio.Event()
    app, broker = make_app(case, n, done)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        transport = broker.transport
        start = time.perf_counter()
        for _ in range(n):
            await transport.publish("bench", PAYLOAD, {})
        await done.wait()
        elapsed = time.perf_counter() - start
        await running.aclose()
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=100_000, help="messages per round")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {case: [] for case in CASES}
    for _ in range(args.rounds):
        for case in CASES:
            rates[case].append(trio.run(run_case, case, args.n))
    print(f"{args.n} messages a round, {args.rounds} rounds, medians; workers=1")
    ratios: dict[str, float] = {}
    for case, label in CASES.items():
        pairs = zip(rates[case], rates["none"], strict=True)
        ratios[case] = statistics.median(r / p for r, p in pairs)
        print(
            f"{label:<32} {statistics.median(rates[case]):>10,.0f} msgs/s   "
            f"x{ratios[case]:.2f} of no dependency (median of per-round ratios); rounds: "
            + ", ".join(f"{r / 1000:.0f}k" for r in rates[case])
        )
    for case in ("plain", "plain_async"):
        met = "met" if ratios[case] >= AIM_PLAIN_RATIO else "NOT met"
        print(
            f"aim: {CASES[case]} >= x{AIM_PLAIN_RATIO:.2f} of no dependency "
            f"({met}: x{ratios[case]:.2f})"
        )
    print(f"generators (no aim): x{ratios['generators']:.2f} of no dependency")


if __name__ == "__main__":
    main()
