"""A request's reply in the pipeline window: with ``pipeline=True`` a value's reply (its
``PUBLISH``) is queued in the delivery's segment and leaves with the read's ``XACK``, in one
round trip, once every delivery of the read is settled; a failure's reply is sent at once."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Middleware, drop
from trio_streams.core.middleware import PublishCall
from trio_streams.core.replies import RemoteError
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient

STEP = 15


async def test_a_windowed_handlers_value_reply_leaves_with_the_reads_acknowledgement(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))
    release = trio.Event()
    answered: list[int] = []
    first_answer = trio.Event()

    @broker.subscriber(RedisStream("quotes", group="g"), workers=2, pipeline=True, block=50)
    async def double(n: int) -> int:
        if n == 2:
            await release.wait()  # the read's other delivery is not settled until this returns
        return n * 2

    async with RedisBroker(redis_server.url) as caller:
        await redis.execute("XGROUP", "CREATE", "quotes", "g", "$", "MKSTREAM")

        async def ask(n: int) -> None:
            answered.append(await caller.request(n, "quotes", timeout=STEP, reply_type=int))
            first_answer.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, 1)
            nursery.start_soon(ask, 2)

            async def both_sent() -> bool:
                return bool(await redis.execute("XLEN", "quotes") == 2)

            async def both_read() -> bool:
                return bool((await redis.execute("XPENDING", "quotes", "g"))[0] == 2)

            # Both requests are in the stream before the app reads: its first read takes both.
            await eventually(both_sent, within=STEP, what="both requests sent")
            async with serving(app):
                await eventually(both_read, within=STEP, what="both requests read")
                # One read holds both: 1's reply waits in the window for 2's handler.
                with trio.move_on_after(0.3):
                    await first_answer.wait()
                assert answered == []
                release.set()
    assert sorted(answered) == [2, 4]


async def test_a_windowed_handlers_failure_is_answered_at_once(redis_server: RedisServer) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("quotes", group="g"), pipeline=True, atomic=True, block=50)
    async def refuse(n: int) -> None:
        del n
        return drop()  # type: ignore[return-value]

    async with serving(app), RedisBroker(redis_server.url) as caller:
        with trio.fail_after(STEP), pytest.raises(RemoteError) as raised:
            await caller.request(1, "quotes", timeout=STEP)
    assert raised.value.reason == "dropped"


async def test_an_atomic_windowed_handler_answers_inside_its_transaction(
    redis_server: RedisServer,
) -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("quotes", group="g"), pipeline=True, atomic=True, block=50)
    async def double(n: int) -> int:
        return n * 2

    async with serving(app), RedisBroker(redis_server.url) as caller:
        with trio.fail_after(STEP):
            assert [await caller.request(n, "quotes", reply_type=int) for n in range(5)] == [
                0, 2, 4, 6, 8,
            ]  # fmt: skip


async def test_a_publish_middleware_sees_a_windowed_handlers_reply(
    redis_server: RedisServer,
) -> None:
    seen: list[bool] = []

    class Watch(Middleware):
        @asynccontextmanager
        async def publish(self, call: PublishCall) -> AsyncIterator[None]:
            seen.append(call.is_reply)
            yield

    app = App("pricing", middlewares=[Watch()])
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("quotes", group="g"), pipeline=True, block=50)
    async def double(n: int) -> int:
        return n * 2

    async with serving(app), RedisBroker(redis_server.url) as caller:
        with trio.fail_after(STEP):
            assert await caller.request(3, "quotes", reply_type=int) == 6
    assert seen == [True]  # sent through the middlewares, not hidden in the window


async def test_a_windowed_handler_answers_under_app_test() -> None:
    app = App("pricing")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))

    @broker.subscriber(RedisStream("quotes", group="g"), pipeline=True)
    async def double(n: int) -> int:
        return n * 2

    async with app.test() as t:
        assert await t.request("quotes", 4, reply_type=int) == 8
