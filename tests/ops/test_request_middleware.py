"""The ``request`` hook of a middleware: optional, it wraps one ``broker.request`` whole (its
publish, wrapped by the ``publish`` hooks, inside it), may add headers, and is told what the
request came to; a handler's reply is a publish the ``publish`` hooks see as a reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import pytest
import trio
import trio.testing

from trio_streams import (
    App,
    ConfigurationError,
    Context,
    DecodeError,
    Destination,
    MemoryBroker,
    MemoryStream,
    Middleware,
    PublishCall,
    RequestCall,
)
from trio_streams.core.replies import CORRELATION_HEADER, REPLY_TO_HEADER, RemoteError
from trio_streams.core.requests import ReplyLost, RequestTimeout


@dataclass
class Order:
    id: int


class Watch(Middleware):
    """Notes its hooks as ``<name> <hook> enter|exit``, and keeps each request's call."""

    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen
        self.calls: list[RequestCall] = []
        self.publishes: list[PublishCall] = []

    @asynccontextmanager
    async def request(self, call: RequestCall) -> AsyncIterator[None]:
        self.seen.append(f"{self.name} request enter")
        call.headers[f"x-{self.name}"] = "stamped"
        try:
            yield
        finally:
            self.seen.append(f"{self.name} request exit {call.outcome}")
            self.calls.append(call)

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        kind = "reply" if call.is_reply else "publish"
        self.seen.append(f"{self.name} {kind} enter")
        try:
            yield
        finally:
            self.seen.append(f"{self.name} {kind} exit")
            self.publishes.append(call)


def replying_app(*middlewares: Middleware, broker_middlewares: tuple[Middleware, ...] = ()) -> App:
    """``double`` answers an order with twice its id; a negative one fails (one attempt)."""
    app = App("svc", middlewares=list(middlewares))
    broker = app.broker(MemoryBroker(middlewares=broker_middlewares))

    @broker.subscriber(MemoryStream("orders"), max_attempts=1, name="double")
    async def double(order: Order, ctx: Context) -> int:
        if order.id < 0:
            raise ValueError("negative")
        return order.id * 2

    return app


# ---- the hook, a sentence a test -------------------------------------------------------------


async def test_a_request_hook_wraps_the_whole_request_with_its_publish_inside() -> None:
    seen: list[str] = []
    watch = Watch("app", seen)
    app = replying_app(watch)
    async with app.test() as t:
        reply = await t.request("orders", Order(4))
    [call] = watch.calls
    assert seen[0] == "app request enter"
    assert seen[1:3] == ["app publish enter", "app publish exit"]
    assert "app request exit ok" in seen
    assert seen.index("app reply exit") < seen.index("app request exit ok")  # replied, then done
    assert call.outcome == "ok" and call.error is None
    assert call.reply is not None and call.reply.json() == 8
    assert call.correlation_id == reply.correlation_id
    assert call.broker == "memory" and call.destination == Destination.stream("orders")
    assert call.message == Order(4)
    assert call.timeout == 10.0
    assert call.kind == "memory" and call.system == "trio_streams.memory"
    assert call.requester is app.brokers[0]


async def test_a_request_hooks_headers_travel_with_the_request() -> None:
    watch = Watch("app", [])
    app = App("svc", middlewares=[watch])
    broker = app.broker(MemoryBroker())
    got: list[dict[str, str]] = []

    @broker.subscriber(MemoryStream("orders"))
    async def echo(order: Order, ctx: Context) -> int:
        got.append(dict(ctx.headers))
        return order.id

    async with app.test() as t:
        await t.request("orders", Order(1), headers={"x-given": "1"})
    [headers] = got
    assert headers["x-app"] == "stamped" and headers["x-given"] == "1"


async def test_the_request_hooks_nest_outermost_first_the_apps_then_the_brokers() -> None:
    seen: list[str] = []
    app = replying_app(Watch("app", seen), broker_middlewares=(Watch("broker", seen),))
    async with app.test() as t:
        await t.request("orders", Order(1))
    requests = [s for s in seen if " request " in s]
    assert requests == [
        "app request enter",
        "broker request enter",
        "broker request exit ok",
        "app request exit ok",
    ]


async def test_the_request_hook_is_optional_a_middleware_without_it_works_unchanged() -> None:
    seen: list[PublishCall] = []

    class PublishOnly(Middleware):  # written before requests had a hook
        @asynccontextmanager
        async def publish(self, call: PublishCall) -> AsyncIterator[None]:
            yield
            seen.append(call)

    app = replying_app(PublishOnly())
    async with app.test() as t:
        assert (await t.request("orders", Order(2))).json() == 4
    request, reply = seen
    assert REPLY_TO_HEADER in request.headers and not request.is_reply
    assert reply.is_reply and not reply.is_error_reply
    assert reply.headers[CORRELATION_HEADER] == request.headers[CORRELATION_HEADER]


# ---- what a request came to ------------------------------------------------------------------


async def test_a_failure_replied_is_the_outcome_remote_error_with_the_error() -> None:
    watch = Watch("app", [])
    app = replying_app(watch)
    async with app.test() as t:
        with pytest.raises(RemoteError):
            await t.request("orders", Order(-1))
    [call] = watch.calls
    assert call.outcome == "remote_error" and isinstance(call.error, RemoteError)
    assert call.reply is None
    [_, reply] = watch.publishes
    assert reply.is_reply and reply.is_error_reply


async def test_no_reply_in_time_is_the_outcome_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    watch = Watch("app", [])
    app = App("svc", middlewares=[watch])
    app.broker(MemoryBroker())
    async with app.test() as t:
        with pytest.raises(RequestTimeout):
            await t.request("nobody", Order(1), timeout=2, unread_ok=True)
    [call] = watch.calls
    assert call.outcome == "timeout" and isinstance(call.error, RequestTimeout)


async def test_a_request_whose_broker_closes_while_it_waits_is_the_outcome_lost() -> None:
    watch = Watch("broker", [])
    broker = MemoryBroker(middlewares=[watch])
    lost: list[BaseException] = []

    async def waits() -> None:
        try:
            await broker.request(Order(1), "nobody")
        except ReplyLost as exc:
            lost.append(exc)

    async with trio.open_nursery() as nursery, broker:
        nursery.start_soon(waits)
        await trio.testing.wait_all_tasks_blocked()
        assert broker.requests_in_flight == 1
        # Leaving the broker closed its reply inbox: the request waiting failed at once.
    assert len(lost) == 1
    [call] = watch.calls
    assert call.outcome == "lost" and isinstance(call.error, ReplyLost)


async def test_a_publish_that_fails_is_the_outcome_error() -> None:
    class Refuses(Middleware):
        @asynccontextmanager
        async def publish(self, call: PublishCall) -> AsyncIterator[None]:
            if call.destination.name:  # always: the publish is refused before it is sent
                raise RuntimeError("refused")
            yield

    watch = Watch("app", [])
    app = replying_app(watch, Refuses())
    async with app.test() as t:
        with pytest.raises(RuntimeError, match="refused"):
            await t.request("orders", Order(1))
    [call] = watch.calls
    assert call.outcome == "error" and isinstance(call.error, RuntimeError)


async def test_a_request_its_caller_cancels_is_the_outcome_cancelled_through_the_hook() -> None:
    cancelled: list[str] = []

    class SeesCancel(Middleware):
        @asynccontextmanager
        async def request(self, call: RequestCall) -> AsyncIterator[None]:
            try:
                yield
            except trio.Cancelled:
                cancelled.append(f"cancelled {call.outcome}")
                raise

    app = App("svc", middlewares=[SeesCancel()])
    app.broker(MemoryBroker())
    async with app.test() as t:
        with trio.CancelScope() as scope:

            async def cancel_when_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                scope.cancel()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_when_waiting)
                await t.request("nobody", Order(1), unread_ok=True)
    assert scope.cancelled_caught
    assert cancelled == ["cancelled cancelled"]


# ---- the nasty cases -------------------------------------------------------------------------


async def test_a_request_refused_for_its_arguments_enters_no_hook() -> None:
    watch = Watch("app", [])
    app = replying_app(watch)
    async with app.test() as t:
        with pytest.raises(ConfigurationError, match="timeout must be"):
            await t.request("orders", Order(1), timeout=0)
        with pytest.raises(ConfigurationError, match="may not set"):
            await t.request("orders", Order(1), headers={CORRELATION_HEADER: "mine"})
    assert watch.calls == [] and watch.seen == []


async def test_decoding_the_reply_comes_after_the_hook_an_ok_request_stays_ok() -> None:
    watch = Watch("app", [])
    app = replying_app(watch)
    async with app.test() as t:
        with pytest.raises(DecodeError):
            await t.request("orders", Order(1), reply_type=Order)  # the reply is an int
    [call] = watch.calls
    assert call.outcome == "ok" and call.reply is not None


async def test_a_request_hook_that_raises_fails_the_request_and_no_reply_is_awaited() -> None:
    class Broken(Middleware):
        @asynccontextmanager
        async def request(self, call: RequestCall) -> AsyncIterator[None]:
            if call.correlation_id:  # always: the hook fails before the request
                raise RuntimeError("middleware bug")
            yield

    app = replying_app(Broken())
    async with app.test() as t:
        with pytest.raises(RuntimeError, match="middleware bug"):
            await t.request("orders", Order(1))
        assert app.brokers[0].requests_in_flight == 0
