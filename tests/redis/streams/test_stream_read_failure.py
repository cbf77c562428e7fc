"""A consumer group whose read fails (its stream key turned into another type) hands what it
read before the failure to its handlers before the subscription fails. (Their acknowledgements
fail in turn, reported as a fault: the stream they belong to is gone.)"""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, AppFailed, Position, RunningApp
from trio_streams.redis import RedisBroker, RedisStream, WrongKeyType
from trio_streams.redis.client import RedisClient
from trio_streams.subscription import SubscriptionState


async def test_deliveries_read_before_a_failed_group_read_are_handled_first(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in (1, 2, 3):
        await redis.execute("XADD", "s", "*", "_payload", str(n))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    handled: list[int] = []
    running: list[RunningApp] = []
    source = RedisStream("s", group="g", start=Position.beginning())

    @broker.subscriber(source, block=20, name="sub")
    async def handle(n: int) -> None:
        if n == 1:
            # All three were read in one XREADGROUP; now the key turns into a string, and the
            # next read fails.
            async def draining() -> bool:
                return running[0].subscriptions["sub"] is SubscriptionState.DRAINING

            replace = "redis.call('DEL', KEYS[1]); return redis.call('SET', KEYS[1], 'text')"
            await redis.execute("EVAL", replace, 1, "s")
            await eventually(draining, what="the failed read")
        handled.append(n)

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(20):
        async with serving(app) as served:
            running.append(served)
            await served.wait_stopped()
    [error] = failed.value.exceptions
    assert isinstance(error.__cause__, WrongKeyType)
    assert handled == [1, 2, 3]
