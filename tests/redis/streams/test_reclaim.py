"""Reclaim inside the subscription (XAUTOCLAIM) and leases for running handlers (XCLAIM)."""

from __future__ import annotations

from collections import Counter

import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient

from .procs import Consumer
from .support import pending_count


def member(url: str, consumer: str, min_idle: float) -> tuple[App, RedisBroker, RedisStream]:
    app = App(f"svc-{consumer}")
    broker = app.broker(RedisBroker(url))
    source = RedisStream(
        "s", group="g", consumer=consumer, start=Position.beginning(), min_idle=min_idle
    )
    return app, broker, source


async def empty_pel(redis: RedisClient) -> None:
    async def empty() -> bool:
        return await pending_count(redis, "s", "g") == 0

    await eventually(empty, within=20, what="an empty pending list")


async def test_kill_9_mid_handler_another_consumer_reclaims_the_entries_and_the_pel_empties(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in range(1, 4):
        await redis.execute("XADD", "s", f"0-{n}", "_payload", str(n))
    dead = Consumer(redis_server.url, "s", "g", "c1", 60, "hang")
    try:
        await dead.wait_line("handling 1")
    finally:
        dead.kill()
    app, broker, source = member(redis_server.url, "c2", 0.3)
    seen: list[tuple[int, int]] = []
    done = trio.Event()

    @broker.subscriber(source, block=50)
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.attempt))
        if len(seen) == 3:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()
        await empty_pel(redis)
    # Each was read by the dead consumer, but only 1 ran there (its handler hung): 1 is on its
    # second attempt, 2 and 3 on their first (a read is not an attempt).
    assert sorted(seen) == [(1, 2), (2, 1), (3, 1)]


async def test_reclaim_passes_keep_the_cursor_and_take_every_entry_of_a_dead_consumer(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
    for n in range(1, 251):
        await redis.execute("XADD", "s", f"0-{n}", "_payload", str(n))
    await redis.execute("XREADGROUP", "GROUP", "g", "gone", "COUNT", 250, "STREAMS", "s", ">")
    app, broker, source = member(redis_server.url, "c2", 0.05)
    seen: Counter[int] = Counter()
    done = trio.Event()

    @broker.subscriber(source, block=50)
    async def handle(n: int) -> None:
        seen[n] += 1
        if len(seen) == 250:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()
        await empty_pel(redis)
    assert set(seen) == set(range(1, 251))


async def test_a_handler_that_runs_3x_min_idle_is_handled_exactly_once(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    min_idle = 0.3
    handled: list[str] = []
    finished = trio.Event()
    apps = []
    for consumer in ("c1", "c2"):
        app, broker, source = member(redis_server.url, consumer, min_idle)

        async def handle(n: int, consumer: str = consumer) -> None:
            handled.append(consumer)
            await trio.sleep(3 * min_idle)  # the work itself: longer than min_idle
            finished.set()

        broker.subscriber(source, name="work", block=20)(handle)
        apps.append((app, broker))
    async with serving(apps[0][0]), serving(apps[1][0]):
        await apps[0][1].publish("s", 1)
        with trio.fail_after(20):
            await finished.wait()
        await empty_pel(redis)
        # Both members kept reclaiming all along; a further pass finds nothing to take.
        with trio.move_on_after(2 * min_idle):
            await trio.sleep_forever()
    assert len(handled) == 1, handled


async def test_idle_consumers_without_pending_entries_are_removed_when_asked(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await redis.execute("XGROUP", "CREATECONSUMER", "s", "g", "gone")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    source = RedisStream("s", group="g", consumer="me", min_idle=0.2, remove_idle_consumers=1)

    @broker.subscriber(source, block=20)
    async def handle(n: int) -> None: ...

    async def names() -> set[str]:
        reply = await redis.execute("XINFO", "CONSUMERS", "s", "g")
        return {(c[b"name"] if isinstance(c, dict) else c[1]).decode() for c in reply}

    async with serving(app):

        async def removed() -> bool:
            return await names() == {"me"}

        await eventually(removed, within=10, what="the idle consumer removed")


async def test_consumers_are_kept_unless_removal_is_asked_for(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await redis.execute("XGROUP", "CREATECONSUMER", "s", "g", "gone")
    app, broker, source = member(redis_server.url, "me", 0.05)

    @broker.subscriber(source, block=20)
    async def handle(n: int) -> None: ...

    async with serving(app):
        with trio.move_on_after(1.2):  # a window past a removal's idle limit: many passes
            await trio.sleep_forever()
        reply = await redis.execute("XINFO", "CONSUMERS", "s", "g")
    assert len(reply) == 2
