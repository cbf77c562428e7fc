"""Request-reply on a real Redis server: ``broker.request`` returns what the handler that takes
the request returned, over every Redis form, with its failures, timeouts and lost connections
typed. One test per sentence of the contract (docs/guides/redis.md, "Request-reply"), then the
nasty cases: shutdown racing requests, a caller closing, a reply nobody receives."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Destination, Middleware, NotConnected
from trio_streams.core.errors import ConfigurationError
from trio_streams.core.middleware import PublishCall
from trio_streams.core.replies import CORRELATION_HEADER, ERROR_HEADER, REPLY_TO_HEADER, RemoteError
from trio_streams.core.requests import NoResponders, ReplyLost, RequestTimeout
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream
from trio_streams.redis.client import (
    NoPermissionError,
    RedisClient,
    RedisConnectionError,
    RedisError,
    connect,
)
from trio_streams.redis.client.subscriber import Message
from trio_streams.redis.frames import decode_frame
from trio_streams.redis.wire import decode_fields
from trio_streams.testing.faults import FaultProxy

#: Bound on any one wait of these tests (a loaded 2-core machine needs slack).
STEP = 15
#: Every reply channel of every broker: ``trio-streams:reply:<process>:<id>``.
REPLY_CHANNELS = "trio-streams:reply:*"


@dataclass
class Quote:
    item: str
    price: float


@dataclass
class Order:
    item: str
    count: int


def price_of(order: Order) -> Quote:
    return Quote(order.item, 2.5 * order.count)


@asynccontextmanager
async def caller_of(url: str) -> AsyncIterator[RedisBroker]:
    """A broker entered without an app: the caller's side, as a script has it."""
    async with RedisBroker(url) as broker:
        yield broker


def entries(server: RedisServer, key: str) -> list[tuple[bytes, dict[str, str]]]:
    """The payload and headers of each entry of stream ``key``, read raw (``XRANGE``)."""
    return [decode_fields(fields) for _, fields in server.command("XRANGE", key, "-", "+")]


async def numsub(redis: RedisClient, channel: str) -> int:
    reply = await redis.execute("PUBSUB", "NUMSUB", channel)
    return int(reply[1])


async def reply_channels(redis: RedisClient) -> list[str]:
    """The reply channels someone subscribes to now (``PUBSUB CHANNELS``)."""
    reply = await redis.execute("PUBSUB", "CHANNELS", REPLY_CHANNELS)
    return sorted(c.decode() for c in reply)


async def collect_replies(
    redis: RedisClient, into: list[tuple[bytes, dict[str, str]]], *, task_status: Any
) -> None:
    """Every reply any broker is sent, as it crossed the wire: a raw ``PSUBSCRIBE``."""
    async with redis.subscribe(patterns=[REPLY_CHANNELS]) as subscription:
        task_status.started()
        async for item in subscription:
            if isinstance(item, Message):
                into.append(decode_frame(item.data))


async def flushed(redis: RedisClient, wire: list[tuple[bytes, dict[str, str]]]) -> None:
    """Wait until what was published on reply channels so far has reached ``wire``: a marker
    published now arrives after it."""
    marker = f"trio-streams:reply:marker:{len(wire)}"
    await redis.execute("PUBLISH", marker, b"marker")

    async def marked() -> bool:
        await trio.lowlevel.checkpoint()
        return any(payload == b"marker" for payload, headers in wire if not headers)

    await eventually(marked, within=STEP, what="the marker on the reply channels")
    wire[:] = [(p, h) for p, h in wire if h]


# ---- 1. the reply is the handler's return value, over every form --------------------------


FORMS: dict[str, tuple[Callable[[str], Any], Callable[[str], Destination]]] = {
    "group stream": (lambda key: RedisStream(key, group="pricing"), Destination.stream),
    "reliable list": (lambda key: RedisList(key, reliable=True), Destination.list),
    "simple list": (lambda key: RedisList(key), Destination.list),
    "channel": (lambda key: RedisChannel(key), Destination.channel),
}


@pytest.mark.parametrize("form", sorted(FORMS))
async def test_a_request_returns_the_value_the_handler_returned(
    redis_server: RedisServer, form: str
) -> None:
    source_of, destination_of = FORMS[form]
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    options: dict[str, Any] = {} if form == "channel" else {"block": 50}

    @broker.subscriber(source_of("quotes"), **options)
    async def quote(order: Order) -> Quote:
        return price_of(order)

    destination = destination_of("quotes")
    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP):
            reply = await caller.request(Order("tea", 2), destination, timeout=STEP)
            assert reply.decode(Quote) == Quote("tea", 5.0)
            assert reply.json() == {"item": "tea", "price": 5.0}
            typed = await caller.request(Order("jam", 3), destination, reply_type=Quote)
            assert typed == Quote("jam", 7.5)
    assert caller.requests_in_flight == 0


# ---- 2. what a request carries -------------------------------------------------------------


async def test_a_request_carries_a_correlation_id_and_a_reply_to_in_its_headers(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[dict[str, str]] = []

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order, ctx: Context) -> Quote:
        seen.append(dict(ctx.message.headers))
        return price_of(order)

    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP):
            first = await caller.request(Order("tea", 1), "quotes")
            second = await caller.request(Order("tea", 1), "quotes")
        [(_, one), (_, two)] = entries(redis_server, "quotes")
        assert one[CORRELATION_HEADER] == first.correlation_id
        assert two[CORRELATION_HEADER] == second.correlation_id != first.correlation_id
        reply_to = one[REPLY_TO_HEADER]
        assert reply_to == two[REPLY_TO_HEADER]  # one reply channel per broker
        assert reply_to.startswith("trio-streams:reply:")
        assert await numsub(redis, reply_to) == 1  # the caller listens on it
        # The delivery has them as sent; ctx.headers, which a handler may forward, does not.
        assert [{k: v for k, v in h.items() if k != "traceparent"} for h in seen] == [one, two]


async def test_user_headers_travel_with_a_request(redis_server: RedisServer) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    tenants: list[str] = []

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order, ctx: Context) -> Quote:
        tenants.append(ctx.headers["tenant"])
        return price_of(order)

    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP):
            await caller.request(Order("tea", 1), "quotes", headers={"tenant": "acme"})
    [(_, headers)] = entries(redis_server, "quotes")
    assert headers["tenant"] == "acme"
    assert tenants == ["acme"]


@pytest.mark.parametrize("reserved", [CORRELATION_HEADER, REPLY_TO_HEADER])
async def test_setting_a_reserved_header_is_refused(
    redis_server: RedisServer, reserved: str
) -> None:
    async with caller_of(redis_server.url) as caller:
        with pytest.raises(ConfigurationError, match=reserved):
            await caller.request(Order("tea", 1), "quotes", headers={reserved: "mine"})
        assert caller.requests_in_flight == 0
    assert redis_server.command("EXISTS", "quotes") == 0  # nothing was published


# ---- 3. failures answer at the message's final outcome -------------------------------------


async def test_a_handler_that_raises_until_given_up_answers_a_remote_error_without_traceback(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    runs: list[int] = []

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, max_attempts=2)
    async def quote(order: Order, ctx: Context) -> Quote:
        runs.append(ctx.attempt)
        raise LookupError(f"no price for {order.item}")

    wire: list[tuple[bytes, dict[str, str]]] = []
    async with serving(app), caller_of(redis_server.url) as caller, trio.open_nursery() as n:
        await n.start(collect_replies, redis, wire)
        with trio.fail_after(STEP), pytest.raises(RemoteError) as raised:
            await caller.request(Order("caviar", 1), "quotes")
        await flushed(redis, wire)
        n.cancel_scope.cancel()
    error = raised.value
    assert (error.handler, error.type, error.reason, error.attempts) == (
        quote.__qualname__,
        "LookupError",
        "max-attempts",
        2,
    )
    assert error.message == "no price for caviar"
    assert quote.__qualname__ in str(error) and "LookupError" in str(error)
    assert runs == [1, 2]  # one answer, at the end: none for the first attempt
    [(payload, headers)] = wire
    assert headers[ERROR_HEADER] == "max-attempts"
    assert json.loads(payload) == {
        "handler": quote.__qualname__,
        "type": "LookupError",
        "message": "no price for caviar",
        "reason": "max-attempts",
        "attempts": 2,
    }
    assert b"Traceback" not in payload and b".py" not in payload


async def test_a_handler_that_fails_once_then_succeeds_answers_with_the_value(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, max_attempts=3)
    async def quote(order: Order, ctx: Context) -> Quote:
        if ctx.attempt == 1:
            raise ConnectionError("price service restarting")
        return price_of(order)

    wire: list[tuple[bytes, dict[str, str]]] = []
    async with serving(app), caller_of(redis_server.url) as caller, trio.open_nursery() as n:
        await n.start(collect_replies, redis, wire)
        with trio.fail_after(STEP):
            assert await caller.request(Order("tea", 2), "quotes", reply_type=Quote) == Quote(
                "tea", 5.0
            )
        await flushed(redis, wire)
        n.cancel_scope.cancel()
    assert len(wire) == 1  # the failed attempt answered nothing
    assert caller.late_replies == 0


async def test_an_undecodable_request_answers_a_remote_error_saying_undecodable(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    runs: list[Order] = []

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order) -> Quote:
        runs.append(order)
        return price_of(order)

    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP), pytest.raises(RemoteError) as raised:
            await caller.request({"item": "tea"}, "quotes")  # no count
    assert raised.value.reason == "undecodable"
    assert raised.value.handler == quote.__qualname__
    assert runs == []


async def test_a_dead_lettered_requests_dead_letter_does_not_answer_again(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    examined = trio.Event()

    @broker.subscriber(
        RedisStream("quotes", group="pricing"), block=50, max_attempts=1, dead_letter="dead"
    )
    async def quote(order: Order) -> Quote:
        raise LookupError(order.item)

    @broker.subscriber(RedisStream("dead", group="inspect"), block=50)
    async def inspect(order: Order, ctx: Context) -> str:
        assert REPLY_TO_HEADER not in ctx.headers
        examined.set()
        return "examined"  # were the letter a request, this would be its answer

    wire: list[tuple[bytes, dict[str, str]]] = []
    async with serving(app), caller_of(redis_server.url) as caller, trio.open_nursery() as n:
        await n.start(collect_replies, redis, wire)
        with trio.fail_after(STEP), pytest.raises(RemoteError, match="LookupError"):
            await caller.request(Order("caviar", 1), "quotes")
        with trio.fail_after(STEP):
            await examined.wait()

        async def settled() -> bool:
            return bool((await redis.execute("XPENDING", "dead", "inspect"))[0] == 0)

        await eventually(settled, within=STEP, what="the dead letter acknowledged")
        await flushed(redis, wire)  # what the inspector sent before its XACK is here now
        n.cancel_scope.cancel()
    [(_, headers)] = wire  # the failure's answer, and nothing from the dead letter's reader
    assert headers[ERROR_HEADER] == "max-attempts"
    assert caller.late_replies == 0


# ---- 4. the reply and the publishers -------------------------------------------------------


async def test_the_reply_goes_to_the_reply_to_as_well_as_to_the_handlers_publishers(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    @broker.publisher("quoted")
    @broker.publisher(Destination.list("quoted-list"))
    async def quote(order: Order) -> Quote:
        return price_of(order)

    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP):
            assert await caller.request(Order("tea", 2), "quotes", reply_type=Quote) == Quote(
                "tea", 5.0
            )
    [(payload, _)] = entries(redis_server, "quoted")
    assert json.loads(payload) == {"item": "tea", "price": 5.0}
    [frame] = redis_server.command("LRANGE", "quoted-list", 0, -1)
    assert json.loads(decode_frame(frame)[0]) == {"item": "tea", "price": 5.0}


# ---- 5. timeouts, late replies -------------------------------------------------------------


async def test_a_request_with_no_reply_in_time_raises_request_timeout_a_too_slow_error(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    release = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order) -> Quote:
        await release.wait()
        return price_of(order)

    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP), pytest.raises(trio.TooSlowError) as raised:
            await caller.request(Order("tea", 1), "quotes", timeout=0.2)
        release.set()
    assert isinstance(raised.value, RequestTimeout)
    assert not isinstance(raised.value, NoResponders)
    assert "stream 'quotes'" in str(raised.value) and "0.2s" in str(raised.value)
    assert raised.value.why == ""  # the stream is served: nothing more to say


async def test_a_late_reply_is_dropped_and_counted_never_given_to_a_later_request(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    release = trio.Event()
    first = True

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, workers=2)
    async def quote(order: Order) -> Quote:
        nonlocal first
        if first:  # slow for the first request only
            first = False
            await release.wait()
        return price_of(order)

    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP):
            with pytest.raises(RequestTimeout):
                await caller.request(Order("slow", 1), "quotes", timeout=0.2)
            assert caller.requests_in_flight == 0
            release.set()  # the first reply is sent now, to nobody waiting

            async def late() -> bool:
                await trio.lowlevel.checkpoint()
                return caller.late_replies == 1

            await eventually(late, within=STEP, what="the late reply counted")
            second = await caller.request(Order("fast", 4), "quotes", reply_type=Quote)
        assert second == Quote("fast", 10.0)  # its own value, not the late one's
        assert caller.late_replies == 1


# ---- 6. cancelling the caller --------------------------------------------------------------


async def test_cancelling_the_caller_leaks_no_request_and_no_subscription(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    started = trio.Event()
    release = trio.Event()
    handled: list[str] = []

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, workers=10)
    async def quote(order: Order) -> Quote:
        handled.append(order.item)
        if len(handled) == 5:
            started.set()
        await release.wait()
        return price_of(order)

    async with serving(app), caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP):
            async with trio.open_nursery() as nursery:
                for n in range(5):
                    nursery.start_soon(caller.request, Order(f"tea{n}", 1), "quotes")
                await started.wait()
                assert caller.requests_in_flight == 5
                nursery.cancel_scope.cancel()
            assert caller.requests_in_flight == 0
            [channel] = await reply_channels(redis)
            assert await numsub(redis, channel) == 1
            release.set()

            async def all_acknowledged() -> bool:
                return bool((await redis.execute("XPENDING", "quotes", "pricing"))[0] == 0)

            await eventually(all_acknowledged, within=STEP, what="every request acknowledged")
            assert await caller.request(Order("jam", 2), "quotes", reply_type=Quote) == Quote(
                "jam", 5.0
            )
            assert await reply_channels(redis) == [channel]  # still one, still subscribed once
            assert await numsub(redis, channel) == 1
        assert caller.requests_in_flight == 0
    assert await reply_channels(redis) == []  # closing the broker unsubscribed it


# ---- 7. a connection or server dying mid-request -------------------------------------------


async def test_the_callers_connections_cut_mid_request_fail_it_at_once_with_reply_lost(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    arrived = trio.Event()
    release = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, workers=4)
    async def quote(order: Order) -> Quote:
        if order.item == "blocked":
            arrived.set()
            await release.wait()
        return price_of(order)

    async with (
        FaultProxy.in_front_of(redis_server) as proxy,
        serving(app),
        caller_of(f"{proxy.url}?backoff_initial=0.01&backoff_cap=0.1") as caller,
    ):
        failure: list[BaseException] = []

        async def ask() -> None:
            try:
                await caller.request(Order("blocked", 1), "quotes", timeout=60)
            except ReplyLost as exc:
                failure.append(exc)

        with trio.fail_after(10):  # far below the request's timeout
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
                await arrived.wait()
                assert proxy.cut() >= 1  # every connection of the caller
        assert [type(f) for f in failure] == [ReplyLost]
        assert "reply subscription" in str(failure[0])
        release.set()
        with trio.fail_after(STEP):  # the caller is whole again
            assert await caller.request(Order("tea", 2), "quotes", reply_type=Quote) == Quote(
                "tea", 5.0
            )
        assert caller.requests_in_flight == 0


async def test_the_server_dying_mid_request_fails_it_at_once_and_requests_work_once_it_is_back(
    redis_server: RedisServer,
) -> None:
    url = f"{redis_server.url}?backoff_initial=0.01&backoff_cap=0.2"
    app = App("pricing", shutdown_timeout=0.5)
    broker = app.broker(RedisBroker(url))
    arrived = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, workers=4)
    async def quote(order: Order) -> Quote:
        if order.item == "blocked":
            arrived.set()
            await trio.sleep_forever()
        return price_of(order)

    async with serving(app), caller_of(url) as caller:
        with trio.fail_after(10):  # far below the request's timeout
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    with pytest.raises(ReplyLost):
                        await caller.request(Order("blocked", 1), "quotes", timeout=60)

                nursery.start_soon(ask)
                await arrived.wait()
                redis_server.kill()
        with trio.fail_after(10), pytest.raises(RequestTimeout) as raised:
            await caller.request(Order("tea", 1), "quotes", timeout=0.5)
        # It waited for the reply subscription to be back, and was never sent.
        assert "not sent: the reply subscription was not listening" in str(raised.value)
        await trio.to_thread.run_sync(redis_server.restart)
        # The server came back empty (no persistence): wait for the responder to make its
        # group again, or the request would be written before it, where the group skips it.
        async with connect(redis_server.url) as redis:

            async def grouped() -> bool:
                try:
                    return bool(await redis.execute("XINFO", "GROUPS", "quotes"))
                except RedisError:  # no such key yet
                    return False

            await eventually(grouped, within=STEP, what="the responder's group made again")
        with trio.fail_after(STEP):
            assert await caller.request(Order("tea", 2), "quotes", reply_type=Quote) == Quote(
                "tea", 5.0
            )


async def test_a_server_that_hangs_mid_request_fails_it_with_reply_lost_before_the_timeout(
    redis_server: RedisServer,
) -> None:
    app = App("pricing", shutdown_timeout=0.5)
    broker = app.broker(RedisBroker(redis_server.url))
    arrived = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order) -> Quote:
        arrived.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    # The reply subscription PINGs a silent server every 0.2 s and gives up 0.2 s later.
    checks = "health_check_interval=0.2&health_check_timeout=0.2"
    async with (
        FaultProxy.in_front_of(redis_server) as proxy,
        serving(app),
        caller_of(f"{proxy.url}?{checks}") as caller,
    ):
        with trio.fail_after(10):  # far below the requests' timeout
            async with trio.open_nursery() as nursery:

                async def ask(item: str) -> None:
                    with pytest.raises(ReplyLost, match="health-check PING"):
                        await caller.request(Order(item, 1), "quotes", timeout=60)

                nursery.start_soon(ask, "waiting for its reply")
                await arrived.wait()
                hole = proxy.blackhole()
                nursery.start_soon(ask, "publishing")  # its XADD hangs: it is given up too
        hole.heal()


async def test_the_publishs_connection_cut_after_the_server_took_it_is_the_clients_error_at_once(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    arrived = trio.Event()
    release = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order) -> Quote:
        if order.item == "held":
            arrived.set()
            await release.wait()
        return price_of(order)

    async with (
        FaultProxy.in_front_of(redis_server) as proxy,
        serving(app),
        caller_of(f"{proxy.url}?backoff_initial=0.01&backoff_cap=0.1") as caller,
    ):
        with trio.fail_after(STEP):
            await caller.request(Order("tea", 1), "quotes")  # its connections are open
        # The next command of a pooled connection (the XADD) reaches the server; its reply
        # never reaches the caller.
        proxy.cut_after(commands=1, match=lambda connection: "SUBSCRIBE" not in connection.issued)
        with trio.fail_after(10), pytest.raises(RedisConnectionError, match="during XADD"):
            await caller.request(Order("held", 1), "quotes", timeout=60)
        assert caller.requests_in_flight == 0
        proxy.heal()
        with trio.fail_after(STEP):
            await arrived.wait()  # the server took it: it is handled, and answered late
            release.set()

            async def late() -> bool:
                await trio.lowlevel.checkpoint()
                return caller.late_replies == 1

            await eventually(late, within=STEP, what="the late reply counted")
            assert await caller.request(Order("jam", 2), "quotes", reply_type=Quote) == Quote(
                "jam", 5.0
            )


class LostAfterTheSend(Middleware):
    """Fails the first request's publish after it was sent and its reply has come: a
    connection lost after the server took the request, noticed late."""

    def __init__(self) -> None:
        self.caller: RedisBroker | None = None
        self.failed = False

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        yield
        if self.failed or self.caller is None:
            return
        self.failed = True
        caller = self.caller

        async def answered() -> bool:
            await trio.lowlevel.checkpoint()
            return caller.requests_in_flight == 0  # the reply was handed to the request

        await eventually(answered, within=STEP, what="the reply handed over")
        raise ConnectionError("lost after the send")


async def test_a_publish_that_fails_after_its_reply_came_returns_the_reply(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order) -> Quote:
        return price_of(order)

    losing = LostAfterTheSend()
    async with serving(app), RedisBroker(redis_server.url, middlewares=[losing]) as caller:
        losing.caller = caller
        with trio.fail_after(STEP):
            reply = await caller.request(Order("tea", 2), "quotes", reply_type=Quote)
        assert losing.failed
        assert reply == Quote("tea", 5.0)  # the request was taken: this is its answer
        assert caller.late_replies == 0


async def test_a_first_request_to_a_dead_server_raises_the_clients_connection_error_at_once(
    redis_server: RedisServer,
) -> None:
    async with caller_of(redis_server.url) as caller:
        redis_server.kill()
        with trio.fail_after(10), pytest.raises(RedisConnectionError, match="cannot connect"):
            await caller.request(Order("tea", 1), "quotes", timeout=60)
        assert caller.requests_in_flight == 0


async def test_a_user_without_the_reply_channels_is_refused_at_once_naming_the_channel(
    redis_server: RedisServer,
) -> None:
    # Redis 7 gives a new ACL user no channel (acl-pubsub-default resetchannels).
    redis_server.command("ACL", "SETUSER", "caller", "on", ">secret", "~*", "+@all")
    async with caller_of(f"redis://caller:secret@127.0.0.1:{redis_server.port}") as caller:
        with trio.fail_after(10), pytest.raises(NoPermissionError, match="trio-streams:reply:"):
            await caller.request(Order("tea", 1), "quotes", timeout=60)
    assert redis_server.command("EXISTS", "quotes") == 0  # refused before it was sent


# ---- 8. many requests in flight ------------------------------------------------------------


async def many_requests(server: RedisServer, count: int) -> None:
    """``count`` requests from one task group, each checked against its own reply. One Trio
    loop runs them all, the responder's workers and both brokers' pools: starting thousands of
    tasks at once makes passes of its scheduler last seconds on a loaded machine, and a
    connection opened meanwhile takes as long to finish its handshake (connect_timeout)."""
    url = f"{server.url}?connect_timeout=60"
    app = App("pricing")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(RedisStream("quotes", group="pricing"), workers=100)
    async def quote(order: Order) -> Quote:
        await trio.lowlevel.checkpoint()
        return price_of(order)

    answers: dict[int, Quote] = {}
    async with serving(app), caller_of(url) as caller:

        async def ask(n: int) -> None:
            answers[n] = await caller.request(
                Order(f"item{n}", n), "quotes", timeout=60, reply_type=Quote
            )

        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                for n in range(count):
                    nursery.start_soon(ask, n)
        assert caller.requests_in_flight == 0
        assert caller.late_replies == 0
    assert answers == {n: Quote(f"item{n}", 2.5 * n) for n in range(count)}


@pytest.mark.slow
async def test_ten_thousand_concurrent_requests_each_get_their_own_reply(
    redis_server: RedisServer,
) -> None:
    await many_requests(redis_server, 10_000)  # about 10 s on 2 cores


# ---- 9. a destination nobody serves --------------------------------------------------------


async def test_a_request_to_a_stream_without_a_group_times_out_saying_so(
    redis_server: RedisServer,
) -> None:
    async with caller_of(redis_server.url) as caller:
        with trio.fail_after(STEP), pytest.raises(RequestTimeout) as raised:
            await caller.request(Order("tea", 1), "nobody-reads", timeout=0.2)
    assert "stream 'nobody-reads' has no consumer group: nothing serves it" in str(raised.value)


async def test_a_request_to_a_channel_nobody_subscribes_raises_no_responders_at_once(
    redis_server: RedisServer,
) -> None:
    async with caller_of(redis_server.url) as caller:
        with trio.fail_after(5), pytest.raises(NoResponders) as raised:
            await caller.request(Order("tea", 1), Destination.channel("nobody"), timeout=3600)
        assert caller.requests_in_flight == 0
    assert str(raised.value).startswith("nobody received the request to channel 'nobody'")
    assert "no subscriber received it" in str(raised.value)


# ---- 10. a broker entered without an app ---------------------------------------------------


async def test_an_entered_broker_publishes_and_requests_without_an_app(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    noted: list[str] = []
    arrived = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50)
    async def quote(order: Order) -> Quote:
        return price_of(order)

    @broker.subscriber(RedisStream("notes", group="pricing"), block=50)
    async def note(text: str) -> None:
        noted.append(text)
        arrived.set()

    async with serving(app):
        async with RedisBroker(redis_server.url) as caller:
            await caller.publish("notes", "hello")
            with trio.fail_after(STEP):
                assert await caller.request(Order("tea", 2), "quotes", reply_type=Quote) == Quote(
                    "tea", 5.0
                )
                await arrived.wait()
        assert noted == ["hello"]
        assert caller.requests_in_flight == 0
    with pytest.raises(NotConnected):  # closed with its block
        await caller.publish("notes", "after")


async def test_entering_a_broker_whose_server_refuses_raises_what_an_apps_start_raises(
    redis_server: RedisServer,
) -> None:
    redis_server.stop()
    app = App("pricing")
    app.broker(RedisBroker(redis_server.url))
    with trio.fail_after(STEP):
        with pytest.raises(RedisError) as by_app:
            await app.serve()  # fails at its start
        with pytest.raises(RedisError) as by_entering:
            async with RedisBroker(redis_server.url):
                pass
    assert type(by_entering.value) is type(by_app.value)
    assert f"127.0.0.1:{redis_server.port}" in str(by_entering.value)


async def test_entering_a_broker_twice_is_refused(redis_server: RedisServer) -> None:
    broker = RedisBroker(redis_server.url)
    async with broker:
        with pytest.raises(ConfigurationError, match="already connected"):
            async with broker:
                pass
        await broker.publish("notes", "still connected")
    assert redis_server.command("XLEN", "notes") == 1


async def test_entering_a_broker_whose_app_runs_is_refused(redis_server: RedisServer) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    async with serving(app):
        with pytest.raises(ConfigurationError, match="already connected"):
            async with broker:
                pass
        await broker.publish("notes", "the app's connection is untouched")
    assert redis_server.command("XLEN", "notes") == 1


async def test_after_exit_publishing_raises_not_connected_saying_to_enter_or_run(
    redis_server: RedisServer,
) -> None:
    broker = RedisBroker(redis_server.url)
    async with broker:
        await broker.publish("notes", "in")
    with pytest.raises(NotConnected, match=r"run its app, or enter it \(async with broker:\)"):
        await broker.publish("notes", "out")
    with pytest.raises(NotConnected):
        await broker.request("out", "notes")
    assert broker.requests_in_flight == 0


# ---- 11. the cluster: tests/redis/cluster/test_request_reply.py ---------------------------

# ---- 12. nasty cases -----------------------------------------------------------------------


async def test_the_responders_shutdown_racing_requests_fails_them_typed_or_answers_them(
    redis_server: RedisServer,
) -> None:
    app = App("pricing", shutdown_timeout=0.5)
    broker = app.broker(RedisBroker(redis_server.url))

    answered = 0
    busy = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, workers=20)
    async def quote(order: Order) -> Quote:
        nonlocal answered
        await trio.sleep(0.01 * (order.count % 5))  # a spread of handling times
        if order.count % 7 == 0:
            await trio.sleep_forever()  # still running at the shutdown's bound
        answered += 1
        if answered == 20:
            busy.set()  # some answered, some in their handler, some unread
        return price_of(order)

    results: dict[int, Quote | BaseException] = {}
    async with caller_of(redis_server.url) as caller:

        async def ask(n: int) -> None:
            try:
                results[n] = await caller.request(
                    Order("tea", n), "quotes", timeout=2, reply_type=Quote
                )
            except (RequestTimeout, ReplyLost, RemoteError) as exc:
                results[n] = exc

        with trio.fail_after(2 + STEP):  # never past the requests' timeout (and slack)
            async with trio.open_nursery() as nursery:
                running = await nursery.start(app.serve)
                for n in range(60):
                    nursery.start_soon(ask, n)
                await busy.wait()
                await running.aclose()
        assert caller.requests_in_flight == 0
    assert len(results) == 60
    for n, result in results.items():
        assert isinstance(result, Quote | RequestTimeout | ReplyLost | RemoteError), result
        if isinstance(result, Quote):
            assert result == Quote("tea", 2.5 * n)
    assert any(isinstance(r, RequestTimeout) for r in results.values())  # the shutdown bit


async def test_a_caller_broker_closing_while_requests_wait_fails_them_with_reply_lost(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pricing", shutdown_timeout=0.5)
    broker = app.broker(RedisBroker(redis_server.url))
    arrived: list[int] = []
    all_arrived = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, workers=5)
    async def quote(order: Order) -> Quote:
        arrived.append(order.count)
        if len(arrived) == 5:
            all_arrived.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    failures: list[BaseException] = []
    async with serving(app):
        caller = RedisBroker(redis_server.url)
        with trio.fail_after(STEP):
            async with trio.open_nursery() as nursery:

                async def ask(n: int) -> None:
                    try:
                        await caller.request(Order("tea", n), "quotes", timeout=60)
                    except ReplyLost as exc:
                        failures.append(exc)

                async with caller:
                    for n in range(5):
                        nursery.start_soon(ask, n)
                    await all_arrived.wait()
                    assert caller.requests_in_flight == 5
        assert [type(f) for f in failures] == [ReplyLost] * 5
        assert caller.requests_in_flight == 0
        assert await reply_channels(redis) == []


async def test_a_reply_that_reaches_no_receiver_is_not_an_error_at_the_responder(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    release = trio.Event()
    wire: list[tuple[bytes, dict[str, str]]] = []

    @broker.subscriber(RedisStream("quotes", group="pricing"), block=50, max_attempts=1)
    async def quote(order: Order) -> Quote:
        await release.wait()
        return price_of(order)

    async def ask(caller: RedisBroker) -> None:
        with pytest.raises(ReplyLost):  # its broker closes under it
            await caller.request(Order("tea", 2), "quotes", timeout=60)

    async with serving(app) as running, trio.open_nursery() as nursery:
        with trio.fail_after(STEP):
            async with caller_of(redis_server.url) as caller:
                nursery.start_soon(ask, caller)

                async def published() -> bool:
                    return bool(await redis.execute("XLEN", "quotes"))

                await eventually(published, within=STEP, what="the request published")
            # The caller is gone, and its reply channel with it: the answer reaches nobody.
            assert await reply_channels(redis) == []
            await nursery.start(collect_replies, redis, wire)
            release.set()

            async def acknowledged() -> bool:
                return bool((await redis.execute("XPENDING", "quotes", "pricing"))[0] == 0)

            await eventually(acknowledged, within=STEP, what="the request acknowledged")
            await flushed(redis, wire)
        nursery.cancel_scope.cancel()
        [stats] = running.stats().values()
        assert stats.faults == 0
    [(payload, _)] = wire  # the answer went out, to no caller, and the message was acked
    assert json.loads(payload) == {"item": "tea", "price": 5.0}
    assert redis_server.command("XLEN", "quotes") == 1  # not retried
    complaints = [r for r in caplog.records if r.levelname in ("WARNING", "ERROR")]
    assert complaints == []
