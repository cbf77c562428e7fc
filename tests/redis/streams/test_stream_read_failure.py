"""A consumer group whose read fails (its stream key turned into another type) hands what it
read before the failure to its handlers before the subscription fails. (Their acknowledgements
fail in turn, reported as a fault: the stream they belong to is gone.)"""

from __future__ import annotations

from tests.redis.read_failure import FailedRead
from tests.redis_servers import RedisServer
from trio_streams import App, Position
from trio_streams.redis import RedisBroker, RedisStream, WrongKeyType
from trio_streams.redis.client import RedisClient


async def test_deliveries_read_before_a_failed_group_read_are_handled_first(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in (1, 2, 3):
        await redis.execute("XADD", "s", "*", "_payload", str(n))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    handled: list[int] = []
    failure = FailedRead()
    source = RedisStream("s", group="g", start=Position.beginning())

    @broker.subscriber(source, block=20, name="sub")
    async def handle(n: int) -> None:
        if n == 1:
            # All three were read in one XREADGROUP; now the key turns into a string, and the
            # next read fails.
            replace = "redis.call('DEL', KEYS[1]); return redis.call('SET', KEYS[1], 'text')"
            await redis.execute("EVAL", replace, 1, "s")
            await failure.wait()
        handled.append(n)

    assert isinstance(await failure.serve(app), WrongKeyType)
    assert handled == [1, 2, 3]
