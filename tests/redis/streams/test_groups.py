"""Consumer groups: own pending entries first, delivery counts, settles, dead letters, crashes."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Outcome, Position, RunningApp, ack, retry
from trio_streams.core.delivery import RETRY_COUNT_HEADER, RETRY_TARGET_HEADER
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.attempts import ledger_key
from trio_streams.redis.client import RedisClient

from .procs import Consumer
from .support import entries, pending_count


async def preload(redis: RedisClient, key: str, count: int) -> None:
    for n in range(1, count + 1):
        await redis.execute("XADD", key, f"0-{n}", "_payload", str(n))


async def pel_empty(redis: RedisClient, key: str = "s", group: str = "g") -> None:
    async def empty() -> bool:
        return await pending_count(redis, key, group) == 0

    await eventually(empty, within=20, what=f"an empty pending list of {key}/{group}")


@asynccontextmanager
async def consumer_app(
    url: str,
    handler: Callable[..., Awaitable[Any]],
    *,
    consumer: str = "c1",
    min_idle: float = 60.0,
    **options: Any,
) -> AsyncIterator[tuple[RedisBroker, RunningApp]]:
    app = App("svc")
    broker = app.broker(RedisBroker(url))
    source = RedisStream(
        "s",
        group="g",
        consumer=consumer,
        start=Position.beginning(),
        min_idle=min_idle,
    )
    broker.subscriber(source, name="sub", block=50, **options)(handler)
    async with serving(app) as running:
        yield broker, running


async def test_a_consumer_reads_its_own_pending_entries_first_at_open(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, "s", 3)
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    # c1 read 1 and 2 before a restart and never acknowledged them; it ran a handler on 1.
    await redis.execute("XREADGROUP", "GROUP", "g", "c1", "COUNT", 2, "STREAMS", "s", ">")
    await redis.execute("HSET", ledger_key("s", "g"), "0-1", 1)
    await redis.execute("XADD", "s", "0-4", "_payload", "4")
    seen: list[tuple[int, int]] = []
    done = trio.Event()

    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.attempt))
        if len(seen) == 4:
            done.set()

    async with consumer_app(redis_server.url, handle):
        with trio.fail_after(10):
            await done.wait()
    # Pending first: 1 had a run (its second attempt now), 2 was only read (still its first);
    # then the new ones.
    assert seen == [(1, 2), (2, 1), (3, 1), (4, 1)]
    await pel_empty(redis)
    assert await redis.execute("EXISTS", ledger_key("s", "g")) == 0  # settled: forgotten


async def test_the_delivery_attempt_is_one_plus_the_runs_counted_plus_the_retry_count_of_a_copy(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
    await redis.execute("XADD", "s", "0-1", "_payload", "1", f"h:{RETRY_COUNT_HEADER}", "2")
    # Read three times (count 3), run once: the reads are not attempts, the run is.
    await redis.execute("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")
    for _ in range(2):
        await redis.execute("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", "0")
    await redis.execute("HSET", ledger_key("s", "g"), "0-1", 1)
    seen: list[int] = []
    done = trio.Event()

    async def handle(n: int, ctx: Context) -> None:
        seen.append(ctx.attempt)
        done.set()

    async with consumer_app(redis_server.url, handle, max_attempts=10):
        with trio.fail_after(10):
            await done.wait()
    assert seen == [1 + 1 + 2]  # two tries before the copy, one run of the copy


async def test_the_pending_count_bounds_the_runs_a_ledger_can_charge(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    # A ledger field that outlived its group (or was written by hand) never charges more runs
    # than there were reads before this one.
    await redis.execute("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
    await redis.execute("XADD", "s", "0-1", "_payload", "1")
    await redis.execute("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")  # one read
    await redis.execute("HSET", ledger_key("s", "g"), "0-1", 7)
    seen: list[int] = []
    done = trio.Event()

    async def handle(n: int, ctx: Context) -> None:
        seen.append(ctx.attempt)
        done.set()

    async with consumer_app(redis_server.url, handle, max_attempts=3):
        with trio.fail_after(10):
            await done.wait()
    assert seen == [2]  # at most one run happened before this read


async def test_a_retry_is_a_copy_xadded_with_retry_headers_then_the_original_xacked_in_one_script(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, "s", 1)
    seen: list[int] = []
    done = trio.Event()

    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append(ctx.attempt)
        if ctx.attempt == 1:
            return retry()
        done.set()
        return ack()

    await redis.execute("CONFIG", "RESETSTAT")
    async with consumer_app(redis_server.url, handle):
        with trio.fail_after(10):
            await done.wait()
        await pel_empty(redis)
    assert seen == [1, 2]
    [original, copy] = await entries(redis, "s")
    assert copy[1]["_payload"] == b"1"
    assert copy[1][f"h:{RETRY_COUNT_HEADER}"] == b"1"
    assert copy[1][f"h:{RETRY_TARGET_HEADER}"] == b"group:g"  # the named group's copy
    stats = (await redis.execute("INFO", "commandstats")).decode()
    assert "cmdstat_eval:" in stats and "cmdstat_multi" not in stats
    del original


async def test_a_dead_letter_is_one_step_xadd_then_xack_in_a_script_with_its_reason(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, "s", 1)
    tried = trio.Event()

    async def handle(n: int, ctx: Context) -> None:
        if ctx.attempt == 2:
            tried.set()
        raise ValueError("bad order")

    async with consumer_app(redis_server.url, handle, max_attempts=2, dead_letter="s.dead"):
        with trio.fail_after(10):
            await tried.wait()

        async def dead_lettered() -> bool:
            return bool(await redis.execute("XLEN", "s.dead"))

        await eventually(dead_lettered, what="a dead letter")
        await pel_empty(redis)
    [(_, fields)] = await entries(redis, "s.dead")
    assert fields["_payload"] == b"1"
    assert fields["h:x-dead-letter-reason"] == b"max-attempts"
    assert fields["h:x-dead-letter-error"] == b"ValueError: bad order"
    assert fields["h:x-dead-letter-stream"] == b"s"


@pytest.mark.parametrize("outcome", ["dead letter", "retry"])
async def test_a_copy_whose_xadd_fails_does_not_acknowledge_the_original_which_stays_pending(
    redis_server: RedisServer, redis: RedisClient, outcome: str
) -> None:
    # MULTI/EXEC would run the XACK after the failed XADD (Redis has no rollback): the entry
    # would be gone while its copy was never written.
    await preload(redis, "s", 1)
    tried = trio.Event()

    async def handle(n: int, ctx: Context) -> Outcome:
        if not tried.is_set():  # not a stream once the start, which refuses it, is over
            await redis.execute("RPUSH", "s.dead", "not a stream")
        if outcome == "retry":
            # The stream has used up its last id under the handler: its copy cannot be added.
            await redis.execute("XSETID", "s", "18446744073709551615-18446744073709551615")
            tried.set()
            return retry()
        tried.set()
        raise ValueError("bad order")

    async with consumer_app(redis_server.url, handle, max_attempts=1, dead_letter="s.dead") as (
        _,
        running,
    ):
        with trio.fail_after(10):
            await tried.wait()

        async def faulted() -> bool:
            return running.stats()["sub"].faults >= 1

        await eventually(faulted, what="the failed settle reported as a fault")
    assert await pending_count(redis, "s", "g") == 1  # still pending: delivered again
    assert await redis.execute("LRANGE", "s.dead", 0, -1) == [b"not a stream"]


async def test_entries_deleted_while_pending_are_acknowledged_and_counted_never_a_crash(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, "s", 3)
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    await redis.execute("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")
    await redis.execute("XDEL", "s", "0-2")
    seen: list[int] = []
    done = trio.Event()

    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 2:
            done.set()

    async with consumer_app(redis_server.url, handle) as (broker, running):
        with trio.fail_after(10):
            await done.wait()
        await pel_empty(redis)
        del broker, running
    assert seen == [1, 3]


@pytest.mark.slow
async def test_kill_9_mid_handler_its_own_restart_handles_the_entries_and_the_pel_empties(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, "s", 3)
    first = Consumer(redis_server.url, "s", "g", "c1", 60, "hang")
    try:
        await first.wait_line("handling 1")
    finally:
        first.kill()
    assert await pending_count(redis, "s", "g") == 3  # read, never acknowledged
    again = Consumer(redis_server.url, "s", "g", "c1", 60, "ok")
    try:
        for n in (1, 2, 3):
            await again.wait_line(f"handled {n}")
        await pel_empty(redis)
    finally:
        again.stop()
    assert await redis.execute("XLEN", "s.dead") == 0


@pytest.mark.slow
async def test_a_message_that_crashes_its_worker_is_dead_lettered_after_max_attempts(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, "s", 1)
    for attempt in (1, 2, 3):
        crashing = Consumer(redis_server.url, "s", "g", "c1", 60, "crash")
        line = await crashing.wait_line("handling 1")
        assert line == f"handling 1 {attempt}"
        assert await crashing.wait_exit() == 3
        crashing.stop()
    # The fourth delivery is past max_attempts=3: dead-lettered before the handler runs.
    last = Consumer(redis_server.url, "s", "g", "c1", 60, "crash")
    try:

        async def dead_lettered() -> bool:
            return bool(await redis.execute("XLEN", "s.dead"))

        await eventually(dead_lettered, within=20, what="the dead letter")
        await pel_empty(redis)
    finally:
        last.stop()
    assert not [line for line in last.lines if line.startswith("handling")]
    [(_, fields)] = await entries(redis, "s.dead")
    assert fields["h:x-dead-letter-reason"] == b"max-attempts"
    assert fields["h:x-dead-letter-attempts"] == b"3"  # it ran three times, not a fourth


@pytest.mark.parametrize("count", [1, 7])
async def test_deliveries_let_go_at_shutdown_stay_pending_and_the_rest_are_acknowledged(
    redis_server: RedisServer, redis: RedisClient, count: int
) -> None:
    await preload(redis, "s", 5)
    started = trio.Event()
    others: set[int] = set()

    async def handle(n: int) -> None:
        if n == 3:
            await trio.sleep_forever()
        others.add(n)
        if len(others) == 4:
            started.set()

    app = App("svc", shutdown_timeout=0.2)
    broker = app.broker(RedisBroker(redis_server.url))
    source = RedisStream("s", group="g", consumer="c1", start=Position.beginning())
    broker.subscriber(source, name="sub", block=50, count=count, workers=5)(handle)
    async with serving(app):
        with trio.fail_after(10):
            await started.wait()
    pending = await redis.execute("XPENDING", "s", "g", "-", "+", 10)
    assert [p[0] for p in pending] == [b"0-3"]


async def test_a_retry_copy_is_the_named_groups_and_any_member_handles_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, "s", 1)
    seen: list[tuple[str, int]] = []
    done = trio.Event()
    apps = []
    for name in ("billing", "billing-canary"):  # two apps, one group
        app = App(name)
        broker = app.broker(RedisBroker(redis_server.url))
        source = RedisStream("s", group="g", consumer=name, start=Position.beginning())

        async def handle(n: int, ctx: Context, name: str = name) -> Outcome:
            seen.append((name, ctx.attempt))
            if ctx.attempt == 1:
                return retry()
            done.set()
            return ack()

        broker.subscriber(source, name="sub", block=20)(handle)
        apps.append(app)
    async with serving(apps[0]), serving(apps[1]):
        with trio.fail_after(10):
            await done.wait()
        await pel_empty(redis)
    [(_, copy)] = [e for e in await entries(redis, "s") if f"h:{RETRY_TARGET_HEADER}" in e[1]]
    assert copy[f"h:{RETRY_TARGET_HEADER}"] == b"group:g"
    assert [attempt for _, attempt in seen] == [1, 2]  # handled by whichever member read it
