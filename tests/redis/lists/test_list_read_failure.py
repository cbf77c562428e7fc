"""A reliable list whose read fails (the key turned into another type) hands what it read
before the failure to its handlers, and settles it, before the subscription fails."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, AppFailed, RunningApp
from trio_streams.redis import RedisBroker, RedisList, WrongKeyType
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.lists import processing_key
from trio_streams.subscription import SubscriptionState

from .support import length


async def test_deliveries_read_before_a_failed_read_are_handled_and_settled_first(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in (1, 2, 3):
        await redis.execute("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    handled: list[int] = []
    running: list[RunningApp] = []

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), block=20, name="sub")
    async def handle(n: int) -> None:
        if n == 1:
            # Every message has been read (moved to the processing list) while this one runs;
            # then the key turns into a string, and the next read fails.
            async def all_read() -> bool:
                return await length(redis, "jobs") == 0

            async def draining() -> bool:
                return running[0].subscriptions["sub"] is SubscriptionState.DRAINING

            await eventually(all_read, what="every message read")
            await redis.execute("SET", "jobs", "not a list")
            await eventually(draining, what="the failed read")
        handled.append(n)

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(20):
        async with serving(app) as served:
            running.append(served)
            await served.wait_stopped()
    [error] = failed.value.exceptions
    assert isinstance(error.__cause__, WrongKeyType)
    assert handled == [1, 2, 3]
    assert await length(redis, processing_key("jobs", "w1")) == 0
