"""A group subscription on a sentinel-monitored primary follows a failover while consuming."""

from __future__ import annotations

import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisSentinelServers
from tests.support import serving
from trio_streams import App, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisConnectionError, connect


async def test_a_sentinel_failover_while_consuming_is_a_fault_and_consuming_goes_on(
    redis_sentinel: RedisSentinelServers,
) -> None:
    url = redis_sentinel.url + "?backoff_initial=0.01&backoff_cap=0.2"
    app = App("svc")
    broker = app.broker(RedisBroker(url))
    seen: set[int] = set()
    changed = trio.Event()

    @broker.subscriber(
        RedisStream("s", group="g", start=Position.beginning()), name="sub", block=50
    )
    async def handle(n: int) -> None:
        seen.add(n)
        changed.set()

    async with connect(url) as redis, serving(app) as running:
        for n in range(1, 6):
            await broker.publish("s", n)

        async def all_of(count: int) -> bool:
            return len(seen) >= count

        await eventually(lambda: all_of(5), within=20, what="the first five")
        assert await redis.execute("WAIT", 1, 5000) == 1  # replicated before the crash
        old = redis_sentinel.primary()
        await trio.to_thread.run_sync(old.kill)
        new = await trio.to_thread.run_sync(redis_sentinel.failover)
        assert new is not old

        async def published() -> bool:
            try:
                await broker.publish("s", 6)
            except RedisConnectionError:
                return False  # met the dead primary: not re-sent, so ours to retry
            return True

        await eventually(published, within=20, what="a publish on the new primary")
        await eventually(lambda: all_of(6), within=20, what="the entry published after")
        assert running.stats()["sub"].faults >= 1
    assert seen == {1, 2, 3, 4, 5, 6}
    await trio.to_thread.run_sync(old.start)
