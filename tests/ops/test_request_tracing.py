"""OpenTelemetry traces of request-reply: a ``CLIENT`` span around the whole request on the
caller, its publish inside; on the handler side the reply's publish inside the handler's span,
linked to the request's span context, which travels in the request's headers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from tests.redis_servers import redis_server
from trio_streams import App, Context, MemoryBroker, MemoryStream, Middleware, PublishCall
from trio_streams.core.replies import CORRELATION_HEADER, REPLY_TO_HEADER, RemoteError
from trio_streams.core.requests import RequestTimeout
from trio_streams.otel import TracingMiddleware

from .test_tracing import tracing


def replying_app(*middlewares: Middleware) -> App:
    """``double`` answers a number with twice it; a negative one with its failure."""
    app = App("shop", middlewares=list(middlewares))
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), max_attempts=1, name="double")
    async def double(n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return n * 2

    return app


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    named = {span.name: span for span in spans}
    assert len(named) == len(spans), [span.name for span in spans]
    return named


def span_id(span: ReadableSpan) -> int:
    assert span.context is not None
    found: int = span.context.span_id
    return found


def parent_id(span: ReadableSpan) -> int | None:
    return None if span.parent is None else span.parent.span_id


async def exchange(middleware: TracingMiddleware, n: int) -> None:
    async with replying_app(middleware).test() as t:
        if n < 0:
            with pytest.raises(RemoteError):
                await t.request("orders", n)
        else:
            assert (await t.request("orders", n)).json() == n * 2


# ---- the spans, a sentence a test ------------------------------------------------------------


async def test_a_request_is_a_client_span_around_the_whole_request_with_its_publish_inside() -> (
    None
):
    middleware, exporter = tracing()
    await exchange(middleware, 4)
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"request orders", "send orders", "process orders", "send"}
    request, send = spans["request orders"], spans["send orders"]
    assert request.kind is SpanKind.CLIENT
    assert request.parent is None  # the caller's own root here
    assert parent_id(send) == span_id(request)
    # The whole request: it began before its publish and ended after the reply was sent.
    assert request.start_time is not None and send.start_time is not None
    assert request.end_time is not None and spans["send"].end_time is not None
    assert request.start_time <= send.start_time and spans["send"].end_time <= request.end_time
    attributes = dict(request.attributes or {})
    assert attributes["messaging.system"] == "trio_streams.memory"
    assert attributes["messaging.operation.name"] == "request"
    assert attributes["messaging.destination.name"] == "orders"
    assert attributes["trio_streams.request.outcome"] == "ok"
    assert request.status.status_code is not StatusCode.ERROR


async def test_the_replys_publish_span_is_inside_the_handlers_span() -> None:
    middleware, exporter = tracing()
    await exchange(middleware, 4)
    spans = by_name(exporter.get_finished_spans())
    process, reply = spans["process orders"], spans["send"]
    assert process.kind is SpanKind.CONSUMER and reply.kind is SpanKind.PRODUCER
    assert parent_id(reply) == span_id(process)
    attributes = dict(reply.attributes or {})
    assert attributes["trio_streams.reply"] == "value"
    assert attributes["messaging.destination.temporary"] is True
    assert attributes["messaging.destination.anonymous"] is True
    assert str(attributes["messaging.destination.name"]).startswith("trio-streams:reply:")


async def test_the_replys_span_is_linked_to_the_requests_span_context() -> None:
    middleware, exporter = tracing()
    await exchange(middleware, 4)
    spans = by_name(exporter.get_finished_spans())
    request, send, process, reply = (
        spans[name] for name in ("request orders", "send orders", "process orders", "send")
    )
    # The context the request's headers carried: its send span, inside the request span.
    assert parent_id(process) == span_id(send)
    [link] = reply.links
    assert link.context.span_id == span_id(send)
    assert request.context is not None and link.context.trace_id == request.context.trace_id


async def test_every_span_of_the_exchange_is_one_trace_carrying_the_correlation_id() -> None:
    middleware, exporter = tracing()
    await exchange(middleware, 4)
    spans = exporter.get_finished_spans()
    assert len({span.context.trace_id for span in spans if span.context is not None}) == 1
    ids = {str(dict(span.attributes or {})["messaging.message.conversation_id"]) for span in spans}
    assert len(ids) == 1 and len(next(iter(ids))) == 32  # the request's correlation id


async def test_a_failures_reply_is_linked_too_and_its_request_span_is_an_error() -> None:
    middleware, exporter = tracing()
    await exchange(middleware, -1)
    spans = by_name(exporter.get_finished_spans())
    request, send, reply = spans["request orders"], spans["send orders"], spans["send"]
    assert dict(reply.attributes or {})["trio_streams.reply"] == "error"
    assert [link.context.span_id for link in reply.links] == [span_id(send)]
    assert dict(request.attributes or {})["trio_streams.request.outcome"] == "remote_error"
    assert request.status.status_code is StatusCode.ERROR
    assert [event.name for event in request.events] == ["exception"]


# ---- the nasty cases -------------------------------------------------------------------------


async def test_a_timed_out_request_is_an_error_span_and_a_cancelled_one_is_not(
    autojump_clock: trio.testing.MockClock,
) -> None:
    middleware, exporter = tracing()
    app = App("shop", middlewares=[middleware])
    app.broker(MemoryBroker())
    async with app.test() as t:
        with pytest.raises(RequestTimeout):
            await t.request("nobody", 1, timeout=1, unread_ok=True)
        with trio.move_on_after(1) as waited:
            await t.request("nobody", 2, timeout=5, unread_ok=True)
    assert waited.cancelled_caught
    timed_out, cancelled = (
        span for span in exporter.get_finished_spans() if span.name == "request nobody"
    )
    assert dict(timed_out.attributes or {})["trio_streams.request.outcome"] == "timeout"
    assert timed_out.status.status_code is StatusCode.ERROR
    attributes = dict(cancelled.attributes or {})
    assert attributes["trio_streams.request.outcome"] == "cancelled"
    assert attributes["trio_streams.cancelled"] is True
    assert cancelled.status.status_code is not StatusCode.ERROR


async def test_a_request_that_came_without_a_trace_context_gets_a_reply_span_without_a_link() -> (
    None
):
    class Untraced(Middleware):
        """Inside the tracing middleware: takes the trace context off the request."""

        @asynccontextmanager
        async def publish(self, call: PublishCall) -> AsyncIterator[None]:
            if REPLY_TO_HEADER in call.headers:
                call.headers.pop("traceparent", None)
            yield

    middleware, exporter = tracing()
    app = replying_app(middleware, Untraced())
    async with app.test() as t:
        await t.request("orders", 1)
    spans = by_name(exporter.get_finished_spans())
    assert spans["process orders"].parent is None  # a root: nothing told it its caller
    assert parent_id(spans["send"]) == span_id(spans["process orders"])
    assert spans["send"].links == ()


async def test_a_reply_span_links_only_to_its_own_request_among_many_in_flight() -> None:
    middleware, exporter = tracing()
    app = App("shop", middlewares=[middleware])
    broker = app.broker(MemoryBroker())
    arrived = trio.Event()
    go = trio.Event()
    count = 0

    @broker.subscriber(MemoryStream("orders"), workers=3, name="slow")
    async def slow(n: int, ctx: Context) -> int:
        nonlocal count
        count += 1
        if count == 3:
            arrived.set()
        await go.wait()
        return n

    async with app.test() as t, trio.open_nursery() as nursery:
        for n in range(3):
            nursery.start_soon(t.request, "orders", n)
        await arrived.wait()
        go.set()  # three replies, each sent while three requests are being handled
    spans = exporter.get_finished_spans()
    sends = {
        dict(s.attributes or {})["messaging.message.conversation_id"]: s
        for s in spans
        if s.name == "send orders"
    }
    replies = [s for s in spans if s.name == "send"]
    assert len(replies) == 3 and len(sends) == 3
    for reply in replies:
        correlation_id = dict(reply.attributes or {})["messaging.message.conversation_id"]
        [link] = reply.links
        assert link.context.span_id == span_id(sends[correlation_id])


# ---- live --------------------------------------------------------------------------------------


async def test_a_live_redis_request_reply_is_traced_across_the_server() -> None:
    from trio_streams.redis import RedisBroker, RedisStream

    middleware, exporter = tracing()
    with redis_server() as server:
        app = App("shop", middlewares=[middleware])
        broker = app.broker(RedisBroker(server.url))

        @broker.subscriber(RedisStream("orders", group="g"), name="double")
        async def double(n: int, ctx: Context) -> int:
            assert CORRELATION_HEADER in ctx.headers
            return n * 2

        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            with trio.fail_after(20):
                assert (await broker.request(21, "orders")).json() == 42
            await running.aclose()
    spans = by_name(exporter.get_finished_spans())
    request, send, process, reply = (
        spans[name] for name in ("request orders", "send orders", "process orders", "send")
    )
    assert request.kind is SpanKind.CLIENT
    assert parent_id(send) == span_id(request)
    assert parent_id(process) == span_id(send)  # across the server, in the request's headers
    assert parent_id(reply) == span_id(process)
    assert [link.context.span_id for link in reply.links] == [span_id(send)]
    assert dict(process.attributes or {})["messaging.system"] == "redis"
    assert dict(reply.attributes or {})["messaging.system"] == "redis"
    assert dict(request.attributes or {})["trio_streams.request.outcome"] == "ok"
