"""Regression tests: one bad message, a seek or a shutdown never loses or strands work."""

from dataclasses import dataclass
from typing import Annotated, Any

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import (
    App,
    Context,
    Depends,
    HealthState,
    MemoryBroker,
    MemoryStream,
    Position,
    drop,
    retry,
    retry_after,
)
from trio_streams.core.codec import DecodeError, decoder_for


@dataclass
class Order:
    id: int
    amount: float

    def __post_init__(self) -> None:
        if self.amount < 0:
            raise ValueError("amount must be >= 0")


@dataclass
class Node:
    name: str
    children: "list[Node]"


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"workers": 4, "by_key": lambda o: 10 // (o.id - 2)},  # the key function raises on id 2
        {"workers": 4, "by_key": lambda o: [o.id] if o.id == 2 else o.id},  # unhashable key
        {"workers": 4, "by_key": lambda o: o.id},
    ],
    ids=["sequential", "key-raises", "unhashable-key", "lanes"],
)
async def test_one_bad_message_never_stops_a_subscription(options: dict[str, Any]) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []

    @broker.subscriber(MemoryStream("s"), max_attempts=1, **options)
    async def handle(order: Order) -> None:
        seen.append(order.id)

    async with app.test() as t:
        for order in ({"id": 1, "amount": 1}, {"id": 2, "amount": 1}, {"id": 3, "amount": 1}):
            await t.publish("s", order)
        await t.publish("s", {"id": 4, "amount": -1})  # refused by __post_init__
        assert 3 in seen and 4 not in seen
        assert t.handler(handle).settled[-1] == drop()
    assert app.health.value.state is HealthState.STOPPED


async def test_one_bad_message_in_a_batch_fails_alone() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    batches: list[list[int]] = []

    @broker.subscriber(MemoryStream("s"), batch=3, max_wait=0.1, dead_letter="dlq")
    async def handle(orders: list[Order]) -> None:
        batches.append([o.id for o in orders])

    async with app.test() as t:
        for n, amount in [(1, 1), (2, -1), (3, 1)]:
            await broker.publish("s", {"id": n, "amount": amount})
        await t.settled()
        assert batches == [[1, 3]]
        assert [m.json()["id"] for m in t.published("dlq")] == [2]


def test_validation_in_post_init_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match=r"\$: expected a valid Order \(amount must be >= 0\)"):
        decoder_for(Order)(b'{"id": 1, "amount": -5}')


def test_self_referential_dataclasses_decode() -> None:
    tree = decoder_for(Node)(b'{"name": "a", "children": [{"name": "b", "children": []}]}')
    assert tree == Node("a", [Node("b", [])])


def test_json_nested_too_deeply_is_a_decode_error() -> None:
    with pytest.raises(DecodeError, match="nested too deeply"):
        decoder_for(list[Any])(b"[" * 100_000 + b"]" * 100_000)


async def test_a_retry_survives_a_seek_as_on_a_stream_file() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    for n in (1, 2):
        broker.hub.append("s", str(n).encode(), {})
    seen: list[tuple[int, int]] = []

    @broker.subscriber(MemoryStream("s").replay())
    async def handle(n: int, ctx: Context) -> Any:
        seen.append((n, ctx.attempt))
        if n == 1 and ctx.attempt == 1:
            return retry()  # a copy goes to the end of the stream
        if n == 2 and len(seen) == 2:
            await ctx.seeker.seek(Position.sequence(2))
        return None

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()
    assert seen == [(1, 1), (2, 1), (2, 1), (1, 2)]


async def test_a_stale_delivery_never_reaches_its_handler_after_an_async_extractor(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    for n in range(1, 6):
        broker.hub.append("s", str(n).encode(), {})
    started: list[tuple[bool, int]] = []
    seeked = False

    async def slow_lookup() -> str:
        await trio.sleep(1)
        return "tenant"

    @broker.subscriber(MemoryStream("s").replay(), workers=2, buffer=4)
    async def handle(n: int, ctx: Context, who: Annotated[str, Depends(slow_lookup)]) -> None:
        nonlocal seeked
        started.append((seeked, n))
        if n == 1 and not seeked:
            await ctx.seeker.seek(Position.sequence(5))
            seeked = True

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()
    assert all(n >= 5 for after, n in started if after)


async def test_delayed_retries_fire_even_when_another_handler_overruns_the_drain(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc", shutdown_timeout=5)
    broker = app.broker(MemoryBroker())
    stuck = trio.Event()

    @broker.subscriber(MemoryStream("s"), workers=2)
    async def handle(word: str) -> Any:
        if word == "stuck":
            stuck.set()
            await trio.sleep_forever()
        return retry_after(3600)

    async with serving(app) as running:
        await running.publish(broker, "s", "later")
        await running.publish(broker, "s", "stuck")
        await stuck.wait()
        await trio.testing.wait_all_tasks_blocked()
    log = broker.hub.log("s")
    assert [e.payload for e in log.slice(log.first_seq, log.next_seq)] == [
        b"later",
        b"stuck",
        b"later",  # the retry copy, published at shutdown although "stuck" never finished
    ]
    assert next(iter(running.stats().values())).outstanding == 0  # the abandoned one too


async def test_the_harness_wakes_when_only_delayed_retries_remain(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), workers=2, max_attempts=2)
    async def handle(word: str) -> Any:
        if word == "slow":
            await trio.sleep(1)
            return None
        return retry_after(60)

    async with app.test() as t:
        start = trio.current_time()
        await broker.publish("s", "later")
        await broker.publish("s", "slow")
        await t.settled()
        assert trio.current_time() - start == pytest.approx(1)  # not held until the retry


async def test_a_cancelled_publish_publishes_nothing() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    async with serving(app):
        with trio.CancelScope() as scope:
            scope.cancel()
            await broker.publish("s", 1)
    assert len(broker.hub.log("s")) == 0
