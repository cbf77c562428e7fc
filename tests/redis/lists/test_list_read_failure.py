"""A reliable list whose read fails (the key turned into another type) hands what it read
before the failure to its handlers, and settles it, before the subscription fails."""

from __future__ import annotations

from tests.redis.client.redis_waits import eventually
from tests.redis.read_failure import FailedRead
from tests.redis_servers import RedisServer
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisList, WrongKeyType
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.lists import processing_key

from .support import length


async def test_deliveries_read_before_a_failed_read_are_handled_and_settled_first(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in (1, 2, 3):
        await redis.execute("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    handled: list[int] = []
    failure = FailedRead()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), block=20, name="sub")
    async def handle(n: int) -> None:
        if n == 1:
            # Every message has been read (moved to the processing list) while this one runs;
            # then the key turns into a string, and the next read fails.
            async def all_read() -> bool:
                return await length(redis, "jobs") == 0

            await eventually(all_read, what="every message read")
            await redis.execute("SET", "jobs", "not a list")
            await failure.wait()
        handled.append(n)

    assert isinstance(await failure.serve(app), WrongKeyType)
    assert handled == [1, 2, 3]
    assert await length(redis, processing_key("jobs", "w1")) == 0
