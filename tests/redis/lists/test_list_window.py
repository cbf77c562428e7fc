"""The pipeline window on a reliable list against a real ``redis-server``: the sentences of
tests/redis/window/test_window.py that hold for lists, with one ``LREM`` per entry as the
settle where a stream sends one ``XACK`` per read."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis.window.support import Writes, calls, one_left_outstanding
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from tests.support import serving
from trio_streams import App, Context, Outcome, Pipeline, ack, drop, retry, retry_after
from trio_streams.redis import RedisBroker, RedisList
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.delays import delay_key
from trio_streams.redis.frames import REDELIVERED_HEADER, decode_frame, encode_frame
from trio_streams.redis.lists import processing_key

from .support import length

PROCESSING = processing_key("jobs", "w1")


def jobs() -> RedisList:
    return RedisList("jobs", reliable=True, consumer="w1")


def frame(n: int) -> bytes:
    return encode_frame(str(n).encode(), {})


async def fill(redis: RedisClient, count: int, *, start: int = 1) -> None:
    pipeline = redis.pipeline()
    for n in range(start, start + count):
        pipeline.add("RPUSH", "jobs", frame(n))
    (await pipeline.execute()).raise_first()


async def drained(redis: RedisClient) -> None:
    """Every entry of the list was taken and removed from the processing list."""

    async def done() -> bool:
        return await length(redis, "jobs") == 0 and await length(redis, PROCESSING) == 0

    await eventually(done, within=10, what="every entry taken and removed")


async def values(redis: RedisClient, keys: list[str]) -> list[bytes | None]:
    return [await redis.execute("GET", key) for key in keys]


async def test_each_delivery_of_a_read_gets_its_own_segment_sent_after_its_ack(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    segments: list[Pipeline] = []
    inside: list[object] = []

    @broker.subscriber(jobs(), pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        segments.append(ctx.pipeline)
        inside.append(ctx.pipeline.incr(f"n:{n}"))  # queued: no reply
        inside.append(await redis.execute("GET", f"n:{n}"))  # and not sent yet

    async with serving(app):
        await drained(redis)
    assert len({id(segment) for segment in segments}) == 3
    assert inside == [None] * 6
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", b"1", b"1"]


async def test_ack_keeps_the_segment_and_drop_retry_retry_after_discard_it_with_their_usual_settle(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, 4)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    outcomes: dict[int, Outcome] = {1: ack(), 2: drop(), 3: retry(), 4: retry_after(3600)}
    handled: list[tuple[int, int]] = []

    @broker.subscriber(jobs(), pipeline=True, max_attempts=5)
    async def handle(n: int, ctx: Context) -> Outcome:
        handled.append((n, ctx.attempt))
        ctx.pipeline.incr(f"n:{n}:{ctx.attempt}")
        return outcomes[n] if ctx.attempt == 1 else ack()

    async with serving(app):

        async def copy_done() -> bool:
            await trio.lowlevel.checkpoint()
            return (3, 2) in handled

        await eventually(copy_done, what="the retry copy handled")
        await drained(redis)
    assert await values(redis, ["n:1:1", "n:2:1", "n:3:1", "n:4:1", "n:3:2"]) == [
        b"1",
        None,
        None,
        None,
        b"1",  # the retry copy's own segment, kept by its ack
    ]
    assert await redis.execute("ZCARD", delay_key("jobs")) == 1  # retry_after: durable


async def test_a_delivery_abandoned_at_shutdown_sends_nothing_and_is_delivered_again(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, 1)
    first = App("svc", shutdown_timeout=0.2)
    broker = first.broker(RedisBroker(redis_server.url))
    started = trio.Event()

    @broker.subscriber(jobs(), pipeline=True)
    async def stuck(n: int, ctx: Context) -> None:
        ctx.pipeline.set("side-effect", "applied")
        started.set()
        await trio.sleep_forever()

    async with serving(first):
        with trio.fail_after(10):
            await started.wait()
    assert await redis.execute("GET", "side-effect") is None
    assert await length(redis, "jobs") == 1  # no LREM: back on the list at the close

    second = App("svc")
    again = second.broker(RedisBroker(redis_server.url))

    @again.subscriber(jobs(), pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.set("side-effect", "applied again")

    async with serving(second):
        await drained(redis)
    assert await redis.execute("GET", "side-effect") == b"applied again"


async def test_nothing_is_flushed_until_the_settled_deliveries_reach_the_reads_count(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    release = trio.Event()
    two_settled = trio.Event()
    settled = 0

    @broker.subscriber(jobs(), pipeline=True, count=3, workers=3)
    async def handle(n: int, ctx: Context) -> None:
        nonlocal settled
        ctx.pipeline.incr(f"n:{n}")
        if n == 3:
            await release.wait()
        settled += 1
        if settled == 2:
            two_settled.set()

    await redis.execute("CONFIG", "RESETSTAT")
    async with serving(app) as running:
        with trio.fail_after(10):
            await two_settled.wait()
        # Wait until both settles are over: a flush they started would be answered by then.
        await eventually(one_left_outstanding(running), what="the first two deliveries settled")
        assert calls(await redis.execute("INFO", "commandstats"), "lrem") == 0
        assert await values(redis, ["n:1", "n:2", "n:3"]) == [None, None, None]
        release.set()
        await drained(redis)
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", b"1", b"1"]
    assert calls(await redis.execute("INFO", "commandstats"), "lrem") == 3


async def test_the_window_flushes_what_was_settled_when_the_subscription_stops(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, 2)
    app = App("svc", shutdown_timeout=0.2)
    broker = app.broker(RedisBroker(redis_server.url))
    first_done = trio.Event()

    @broker.subscriber(jobs(), pipeline=True, count=2, workers=2)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr(f"n:{n}")
        if n == 2:
            await trio.sleep_forever()  # never settled
        first_done.set()

    async with serving(app):
        with trio.fail_after(10):
            await first_done.wait()
        assert await redis.execute("GET", "n:1") is None  # the read is not complete
    # Stopped: entry 1's segment and LREM were flushed; entry 2 is back on the list, unapplied,
    # charged with the run the drain gave up on.
    assert await values(redis, ["n:1", "n:2"]) == [b"1", None]
    [back] = await redis.execute("LRANGE", "jobs", 0, -1)
    payload, headers = decode_frame(bytes(back))
    assert (payload, headers) == (b"2", {REDELIVERED_HEADER: "1"})


async def test_a_flush_sends_the_kept_segments_in_commit_order_then_one_lrem_per_entry(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    turn = [trio.Event() for _ in range(4)]
    turn[1].set()

    @broker.subscriber(jobs(), pipeline=True, count=3, workers=3)
    async def handle(n: int, ctx: Context) -> Outcome:
        await turn[n].wait()  # settle in entry order, whatever the workers' schedule
        ctx.pipeline.incr(f"n:{n}")
        turn[min(n + 1, 3)].set()
        return drop() if n == 2 else ack()

    writes = Writes().install(monkeypatch)
    async with serving(app):
        await drained(redis)
    key = PROCESSING.encode()
    assert writes.with_command(b"LREM") == [
        [
            (b"INCR", b"n:1"),
            (b"INCR", b"n:3"),
            (b"LREM", key, b"1", frame(1)),
            (b"LREM", key, b"1", frame(2)),
            (b"LREM", key, b"1", frame(3)),
        ]
    ]
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", None, b"1"]


async def test_under_load_one_pipeline_write_per_read(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, 1000)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(jobs(), pipeline=True, count=100)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr("total")

    await redis.execute("CONFIG", "RESETSTAT")
    writes = Writes().install(monkeypatch)
    async with serving(app):
        await drained(redis)
    monkeypatch.undo()
    info = await redis.execute("INFO", "commandstats")
    assert await redis.execute("GET", "total") == b"1000"
    flushes = writes.with_command(b"LREM")
    # Ten reads of 100: ten writes, each 100 INCRs then 100 LREMs.
    assert len(flushes) == 10
    for flush in flushes:
        assert [c[0] for c in flush] == [b"INCR"] * 100 + [b"LREM"] * 100
    assert (calls(info, "lrem"), calls(info, "incr")) == (1000, 1000)
    # And each read is one write too: a BLMOVE then 99 LMOVEs.
    moves = writes.with_command(b"BLMOVE")
    assert all([c[0] for c in w] == [b"BLMOVE"] + [b"LMOVE"] * 99 for w in moves)


async def test_atomic_wraps_each_segment_in_multi_exec_with_its_own_lrem(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    turn = [trio.Event() for _ in range(4)]
    turn[1].set()

    @broker.subscriber(jobs(), pipeline=True, atomic=True, count=3, workers=3)
    async def handle(n: int, ctx: Context) -> Outcome:
        await turn[n].wait()
        ctx.pipeline.incr(f"n:{n}")
        turn[min(n + 1, 3)].set()
        return drop() if n == 2 else ack()

    writes = Writes().install(monkeypatch)
    async with serving(app):
        await drained(redis)
    key = PROCESSING.encode()
    assert writes.with_command(b"LREM") == [
        [
            (b"MULTI",),
            (b"INCR", b"n:1"),
            (b"LREM", key, b"1", frame(1)),
            (b"EXEC",),
            (b"MULTI",),
            (b"INCR", b"n:3"),
            (b"LREM", key, b"1", frame(3)),
            (b"EXEC",),
            (b"LREM", key, b"1", frame(2)),
        ]
    ]
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", None, b"1"]


async def test_a_failed_flush_is_one_fault_and_its_entries_stay_and_come_again() -> None:
    rules = ("app", "on", ">pw", "~*", "&*", "+@all", "-lrem")
    with start_redis_server("--user", *rules) as server:
        url = f"redis://app:pw@{server.host}:{server.port}"
        async with connect(server.url) as admin:
            await fill(admin, 3)
            app = App("svc")
            broker = app.broker(RedisBroker(url))
            seen: list[int] = []

            @broker.subscriber(jobs(), name="sub", pipeline=True, block=20)
            async def handle(n: int, ctx: Context) -> None:
                ctx.pipeline.incr(f"n:{n}")
                seen.append(n)

            async with serving(app) as running:

                async def failed() -> bool:
                    await trio.lowlevel.checkpoint()
                    return "flush" in running.stats()["sub"].degraded

                await eventually(failed, what="the failed flush reported")
                assert await length(admin, PROCESSING) == 3  # kept, not lost
                await admin.execute("ACL", "SETUSER", "app", "+lrem")
                await eventually(
                    lambda: _empty(admin), within=20, what="the entries removed at last"
                )
                assert "flush" not in running.stats()["sub"].degraded
    assert set(seen) == {1, 2, 3}
    assert len(seen) > 3  # delivered again after the failure


async def _empty(redis: RedisClient) -> bool:
    return await length(redis, PROCESSING) == 0


async def test_with_workers_commit_order_is_settle_order(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, 4)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    finish_order = [3, 1, 4, 2]
    turn = {n: trio.Event() for n in finish_order}
    turn[finish_order[0]].set()

    @broker.subscriber(jobs(), pipeline=True, count=4, workers=4)
    async def handle(n: int, ctx: Context) -> None:
        await turn[n].wait()
        ctx.pipeline.rpush("order", n)
        following = finish_order.index(n) + 1
        if following < len(finish_order):
            turn[finish_order[following]].set()

    async with serving(app):
        await drained(redis)
    assert await redis.execute("LRANGE", "order", 0, -1) == [b"3", b"1", b"4", b"2"]
