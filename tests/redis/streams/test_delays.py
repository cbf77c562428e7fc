"""Durable retry_after: a ZSET schedule, moved back by one atomic script."""

from __future__ import annotations

from collections import Counter

import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from tests.support import serving
from trio_streams import App, Context, Outcome, Position, ack, retry_after
from trio_streams.core.delivery import RETRY_COUNT_HEADER
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect, key_slot
from trio_streams.redis.delays import delay_key

from .support import entries, pending_count


def member_app(url: str, consumer: str) -> tuple[App, RedisBroker, RedisStream]:
    app = App("svc")
    broker = app.broker(RedisBroker(url))
    source = RedisStream("s", group="g", consumer=consumer, start=Position.beginning())
    return app, broker, source


def test_the_delay_key_shares_the_streams_cluster_slot() -> None:
    assert delay_key("orders") == "{orders}:delayed"
    assert key_slot(delay_key("orders")) == key_slot("orders")
    assert delay_key("{eu}.orders") == "{eu}.orders:delayed"
    assert key_slot(delay_key("{eu}.orders")) == key_slot("{eu}.orders")


async def test_retry_after_schedules_the_copy_in_a_zset_acks_the_original_and_returns_it_later(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "s", "0-1", "_payload", "1", "h:trace", "t1")
    app, broker, source = member_app(redis_server.url, "c1")
    seen: list[tuple[int, int, str]] = []
    scheduled = trio.Event()
    done = trio.Event()

    @broker.subscriber(source, name="sub", block=50)
    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append((n, ctx.attempt, ctx.headers.get("trace", "")))
        if ctx.attempt == 1:
            scheduled.set()
            return retry_after(0.5)
        done.set()
        return ack()

    async with serving(app):
        with trio.fail_after(10):
            await scheduled.wait()

        async def in_schedule() -> bool:
            return bool(await redis.execute("ZCARD", "{s}:delayed") == 1)

        await eventually(in_schedule, what="the copy in the schedule")
        assert await pending_count(redis, "s", "g") == 0  # the original is acknowledged
        with trio.fail_after(10):
            await done.wait()
        assert await redis.execute("ZCARD", "{s}:delayed") == 0
    assert seen == [(1, 1, "t1"), (1, 2, "t1")]
    copies = [f for _, f in await entries(redis, "s") if f"h:{RETRY_COUNT_HEADER}" in f]
    assert len(copies) == 1


async def test_every_consumers_promoter_runs_and_each_copy_is_moved_back_exactly_once(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in range(1, 41):
        await redis.execute("XADD", "s", f"0-{n}", "_payload", str(n))
    handled: Counter[tuple[int, int]] = Counter()
    done = trio.Event()
    apps = []
    for consumer in ("c1", "c2", "c3"):
        app, broker, source = member_app(redis_server.url, consumer)

        async def handle(n: int, ctx: Context) -> Outcome:
            handled[(n, ctx.attempt)] += 1
            if sum(1 for _, attempt in handled if attempt == 2) == 40:
                done.set()
            return retry_after(0.2) if ctx.attempt == 1 else ack()

        broker.subscriber(source, name="sub", block=20, count=5)(handle)
        apps.append(app)
    async with serving(apps[0]), serving(apps[1]), serving(apps[2]):
        with trio.fail_after(20):
            await done.wait()
    assert set(handled.values()) == {1}
    copies = [f for _, f in await entries(redis, "s") if f"h:{RETRY_COUNT_HEADER}" in f]
    assert len(copies) == 40


async def test_a_redis_restart_with_aof_keeps_the_schedule_nothing_lost_no_duplicate_copy() -> None:
    with start_redis_server("--appendonly", "yes", "--appendfsync", "always") as server:
        async with connect(server.url) as redis:
            await redis.execute("XADD", "s", "0-1", "_payload", "1")
            app, broker, source = member_app(server.url, "c1")
            seen: list[int] = []
            done = trio.Event()

            @broker.subscriber(source, name="sub", block=50)
            async def handle(n: int, ctx: Context) -> Outcome:
                seen.append(ctx.attempt)
                if ctx.attempt == 1:
                    return retry_after(1.0)
                done.set()
                return ack()

            async with serving(app):

                async def in_schedule() -> bool:
                    return bool(await redis.execute("ZCARD", "{s}:delayed") == 1)

                await eventually(in_schedule, what="the copy in the schedule")
                await trio.to_thread.run_sync(server.restart)
                with trio.fail_after(20):
                    await done.wait()

            async def settled() -> bool:
                try:
                    return await pending_count(redis, "s", "g") == 0
                except ConnectionError:
                    return False

            await eventually(settled, within=20, what="an empty pending list")
            copies = [f for _, f in await entries(redis, "s") if f"h:{RETRY_COUNT_HEADER}" in f]
    assert seen == [1, 2]
    assert len(copies) == 1
