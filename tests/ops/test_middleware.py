"""Middlewares: a typed way to wrap handling (decode -> handler -> settle) and publishing, per
app, router or subscriber, seeing the delivery, context, outcome and timing, shaped as async
context managers so cancellation and errors are visible."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio

from tests.support import serving
from trio_streams import (
    App,
    AppFailed,
    ConfigurationError,
    Context,
    HandlerCall,
    MemoryBroker,
    MemoryStream,
    Middleware,
    Outcome,
    PublishCall,
    Router,
    drop,
)
from trio_streams.core.codec import DecodeError


@dataclass
class Order:
    id: int


class Recording(Middleware):
    """Notes what it sees, as ``<name> enter|exit ...``."""

    def __init__(self, name: str, seen: list[str], calls: list[HandlerCall] | None = None) -> None:
        self.name, self.seen, self.calls = name, seen, calls

    @asynccontextmanager
    async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
        self.seen.append(f"{self.name} enter {call.subscription}")
        try:
            yield
        finally:
            self.seen.append(f"{self.name} exit")
            if self.calls is not None:
                self.calls.append(call)


class HeaderStamp(Middleware):
    def __init__(self, seen: list[PublishCall]) -> None:
        self.seen = seen

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        call.headers["x-stamp"] = call.destination.name
        try:
            yield
        finally:
            self.seen.append(call)


async def test_a_handle_hook_sees_the_delivery_context_decoded_message_outcome_and_settle() -> None:
    calls: list[HandlerCall] = []
    app = App("svc", middlewares=[Recording("app", [], calls)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order, ctx: Context) -> None: ...

    async with app.test() as t:
        await t.publish("orders", Order(7))
    [call] = calls
    assert call.subscription == "bill" and call.broker == "memory"
    assert call.delivery.stream == "orders" and call.attempt == 1
    assert call.message == Order(7)
    assert isinstance(call.context, Context)
    assert call.outcome is not None and call.outcome.kind.value == "ack"
    assert call.verdict is not None and call.verdict.dead_letter is None
    assert call.called and call.settled and call.error is None


async def test_app_broker_router_and_subscriber_middlewares_nest_outermost_first() -> None:
    seen: list[str] = []
    app = App("svc", middlewares=[Recording("app", seen)])
    broker = app.broker(MemoryBroker(middlewares=[Recording("broker", seen)]))
    router = Router(middlewares=[Recording("router", seen)])

    @router.subscriber(MemoryStream("orders"), middlewares=[Recording("sub", seen)], name="bill")
    async def bill(order: Order) -> None:
        seen.append("handler")

    broker.include_router(router)
    async with app.test() as t:
        await t.publish("orders", Order(1))
    assert seen == [
        "app enter bill",
        "broker enter bill",
        "router enter bill",
        "sub enter bill",
        "handler",
        "sub exit",
        "router exit",
        "broker exit",
        "app exit",
    ]


async def test_a_handler_error_is_not_raised_through_the_hook_but_recorded_with_its_outcome() -> (
    None
):
    calls: list[HandlerCall] = []
    app = App("svc", middlewares=[Recording("app", [], calls)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), max_attempts=2, dead_letter="dlq", name="bill")
    async def bill(order: Order) -> None:
        raise ValueError("no")

    async with app.test() as t:
        await t.publish("orders", Order(1))
    first, second = calls
    assert isinstance(first.error, ValueError)
    assert first.verdict is not None and first.verdict.outcome.is_retry
    assert second.attempt == 2
    assert second.verdict is not None and second.verdict.dead_letter == "dlq"


async def test_an_undecodable_payload_is_seen_with_the_handler_not_called() -> None:
    calls: list[HandlerCall] = []
    app = App("svc", middlewares=[Recording("app", [], calls)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order) -> None: ...

    async with app.test() as t:
        await t.publish("orders", b"not json")
    [call] = calls
    assert not call.called and call.message is None
    assert isinstance(call.error, DecodeError)
    assert call.verdict is not None and call.verdict.outcome.kind.value == "drop"


async def test_cancellation_passes_through_the_hook_like_through_any_async_with(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []

    class SeesCancel(Middleware):
        @asynccontextmanager
        async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
            try:
                yield
            except trio.Cancelled:
                seen.append("cancelled")
                raise

    app = App("svc", shutdown_timeout=1.0, middlewares=[SeesCancel()])
    broker = app.broker(MemoryBroker())
    started = trio.Event()

    @broker.subscriber(MemoryStream("orders"))
    async def stuck(order: Order) -> None:
        started.set()
        await trio.sleep_forever()

    async with serving(app):
        await broker.publish("orders", Order(1))
        await started.wait()
    assert seen == ["cancelled"]  # the drain timed out and cancelled the handler


async def test_a_hook_that_raises_fails_the_subscription() -> None:
    class Broken(Middleware):
        @asynccontextmanager
        async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
            if call.attempt:  # always: the hook fails before the handling
                raise RuntimeError("middleware bug")
            yield

    app = App("svc", middlewares=[Broken()])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"))
    async def bill(order: Order) -> None: ...

    with pytest.raises(AppFailed, match="middleware bug"):
        async with app.test() as t:
            await t.publish("orders", Order(1))


async def test_a_publish_hook_can_add_headers_and_sees_the_receipt() -> None:
    seen: list[PublishCall] = []
    app = App("svc", middlewares=[HeaderStamp(seen)])
    broker = app.broker(MemoryBroker())
    got: list[str] = []

    @broker.subscriber(MemoryStream("receipts"))
    async def note(n: int, ctx: Context) -> None:
        got.append(ctx.headers["x-stamp"])

    @broker.subscriber(MemoryStream("orders"))
    @broker.publisher("receipts")
    async def bill(order: Order) -> int:
        return order.id

    async with app.test() as t:
        await t.publish("orders", Order(3))
    assert got == ["receipts"]  # the handler's published result carried the header
    destinations = [call.destination.name for call in seen]
    assert destinations == ["orders", "receipts"]  # the test's own publish, then the result
    assert all(call.receipt is not None and call.error is None for call in seen)


async def test_a_failed_publish_is_raised_through_the_publish_hook() -> None:
    errors: list[BaseException] = []

    class SeesErrors(Middleware):
        @asynccontextmanager
        async def publish(self, call: PublishCall) -> AsyncIterator[None]:
            try:
                yield
            except Exception as exc:
                errors.append(exc)
                raise

    app = App("svc", middlewares=[SeesErrors()])
    broker = app.broker(MemoryBroker())
    async with serving(app):
        with pytest.raises(TypeError):
            await broker.publish("orders", object())  # cannot be encoded
    assert len(errors) == 1 and isinstance(errors[0], TypeError)


async def test_batch_handlers_give_each_delivery_its_own_call() -> None:
    calls: list[HandlerCall] = []
    app = App("svc", middlewares=[Recording("app", [], calls)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), batch=3)
    async def bill(orders: list[Order]) -> Outcome:
        return drop()

    async with app.test() as t:
        for n in range(3):  # published before the batch is read: one batch of three
            await broker.publish("orders", Order(n))
        await t.settled()
    assert sorted(call.delivery.payload for call in calls) == [
        b'{"id":0}',
        b'{"id":1}',
        b'{"id":2}',
    ]
    assert all(c.verdict is not None and c.verdict.outcome.kind.value == "drop" for c in calls)


@pytest.mark.parametrize("value", [object(), [object()], Middleware])
def test_middlewares_that_are_not_middlewares_are_refused_with_a_clear_error(
    value: object,
) -> None:
    with pytest.raises(ConfigurationError, match="Middleware"):
        App("svc", middlewares=value)  # type: ignore[arg-type]
