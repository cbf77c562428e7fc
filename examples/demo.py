"""The trio-streams demo: orders on a stream file, audited by a handler that seeks.

    python examples/demo.py [PATH]

1. A small shop app publishes 3000 orders to a stream file (``orders.ss`` in a temporary
   directory, or PATH, which must not exist yet).
2. An audit app replays the file from the beginning and totals the orders. When the handler
   meets an order with a negative amount, it seeks its own subscription back five orders and
   reviews that window once more before going on.
3. The replay ends after the last order, and the audit app stops by itself.

Nothing runs but this process: the stream file is the broker.
"""

from __future__ import annotations

import random
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import trio

from trio_streams import App, Context
from trio_streams.file import FileBroker, FilePosition, FileStream

ORDERS = 3_000
#: Orders whose amount comes out negative: what the audit is looking for.
SUSPICIOUS = {777, 1_500, 2_222}
#: How far back the audit looks when it finds one.
WINDOW = 5


@dataclass
class Order:
    id: int
    customer: str
    amount: float


def make_orders() -> list[Order]:
    rng = random.Random(7)
    orders = []
    for n in range(1, ORDERS + 1):
        amount = round(rng.uniform(5, 500), 2)
        orders.append(
            Order(n, f"customer-{rng.randrange(100):03d}", -amount if n in SUSPICIOUS else amount)
        )
    return orders


async def write_orders(path: Path) -> None:
    """The shop: publish every order to the ``orders`` stream of the file."""
    shop = App("shop")
    log = shop.broker(FileBroker(path))
    async with trio.open_nursery() as nursery:
        running = await nursery.start(shop.serve)
        for order in make_orders():
            await running.publish(log, "orders", order)
        await running.aclose()
    print(f"wrote {ORDERS} orders to {path.name} ({size_of(path):,} bytes)")


def size_of(path: Path) -> int:
    return path.stat().st_size


@dataclass
class Audit:
    total: float = 0.0
    counted: int = 0
    #: The highest sequence number audited so far; anything at or below it is a review.
    high: int = 0
    flagged: int = 0
    reviewed: int = 0


def build_audit(path: Path) -> tuple[App, Audit]:
    auditor = App("audit")
    log = auditor.broker(FileBroker(path, existing_only=True))
    audit = Audit()

    @log.subscriber(FileStream("orders").replay())
    async def check(order: Order, ctx: Context) -> None:
        assert ctx.position is not None and ctx.position.value is not None
        seq = ctx.position.value
        if seq <= audit.high:  # read again after a seek: a review, not a new order
            audit.reviewed += 1
            mark = "  <- flagged" if order.amount < 0 else ""
            print(f"    review seq {seq}: {order.customer} paid {order.amount:8.2f}{mark}")
            return
        audit.high = seq
        if order.amount < 0:
            audit.flagged += 1
            back = max(1, seq - WINDOW)
            print(
                f"  order {order.id} (seq {seq}) has amount {order.amount:.2f}: "
                f"seeking back to seq {back} to review what came before"
            )
            await ctx.seeker.seek(FilePosition.sequence(back))
            return
        audit.total += order.amount
        audit.counted += 1

    return auditor, audit


async def main(path: Path) -> None:
    await write_orders(path)
    auditor, audit = build_audit(path)
    print(f"auditing {path.name} from the beginning")
    async with trio.open_nursery() as nursery:
        running = await nursery.start(auditor.serve)
        await running.wait_stopped()  # the replay ends, so the app stops by itself
    print(
        f"replay finished: {audit.counted} orders totalling {audit.total:,.2f}, "
        f"{audit.flagged} flagged, {audit.reviewed} re-read after {audit.flagged} seeks"
    )
    print(f"the audit app stopped by itself ({auditor.health.value})")


def run(argv: list[str]) -> int:
    if len(argv) > 1:
        print("usage: python examples/demo.py [PATH]", file=sys.stderr)
        return 2
    if argv:
        path = Path(argv[0])
        if path.exists():
            print(f"{path} exists; give the demo a new file", file=sys.stderr)
            return 2
        trio.run(main, path)
        return 0
    with tempfile.TemporaryDirectory() as directory:
        trio.run(main, Path(directory) / "orders.ss")
    return 0


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))
