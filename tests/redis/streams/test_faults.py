"""Faults a group subscription recovers from: lost connections, a vanished group."""

from __future__ import annotations

import logging
import os
from collections import Counter

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from tests.support import serving
from trio_streams import RETRY_COUNT_HEADER, App, Context, Outcome, Position, ack, retry
from trio_streams.core.app import AppFailed, HealthState
from trio_streams.redis import GroupVanished, RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.wire import text

from .procs import Consumer
from .support import entries, pending_count


def _app(url: str, **source: object) -> tuple[App, RedisBroker]:
    del source
    app = App("svc")
    return app, app.broker(RedisBroker(url))


async def test_a_lost_connection_is_a_fault_with_degraded_health_and_resumes_from_own_pending() -> (
    None
):
    # AOF on, fsync always: a restart keeps the stream, the group and its pending list.
    with start_redis_server("--appendonly", "yes", "--appendfsync", "always") as server:
        async with connect(server.url) as redis:
            for n in range(1, 6):
                await redis.execute("XADD", "s", f"0-{n}", "_payload", str(n))
            app, broker = _app(server.url)
            seen: list[tuple[int, int]] = []
            holding = trio.Event()
            restarted = trio.Event()
            done = trio.Event()

            source = RedisStream("s", group="g", consumer="c1", start=Position.beginning())

            @broker.subscriber(source, name="sub", block=50, count=2)
            async def handle(n: int, ctx: Context) -> None:
                seen.append((n, ctx.attempt))
                if n == 1 and ctx.attempt == 1:
                    holding.set()
                    await restarted.wait()
                if {m for m, _ in seen} == {1, 2, 3, 4, 5}:
                    done.set()

            async with serving(app) as running, trio.open_nursery() as watching:
                degraded = trio.Event()

                async def see_degraded() -> None:
                    # Watching from before the restart: the fault may begin and clear while
                    # the restart's thread still waits for the new server to answer.
                    await running.health.wait_value(lambda h: h.state is HealthState.DEGRADED)
                    degraded.set()

                watching.start_soon(see_degraded)
                with trio.fail_after(20):
                    await holding.wait()
                    await trio.to_thread.run_sync(server.restart)
                    await degraded.wait()
                    restarted.set()
                    await done.wait()
                    await running.health.wait_value(lambda h: h.state is HealthState.RUNNING)

                async def empty() -> bool:
                    try:
                        return await pending_count(redis, "s", "g") == 0
                    except ConnectionError:
                        return False

                await eventually(empty, within=20, what="an empty pending list")
                stats = running.stats()["sub"]
                assert stats.faults >= 1 and stats.degraded == ()
    assert {n for n, _ in seen} == {1, 2, 3, 4, 5}
    # Entry 2 was read with 1 and never acknowledged before the restart: delivered again from
    # the consumer's own pending list (or delivered once, if its XACK got through first).
    assert all(attempt <= 2 for _, attempt in seen)


async def test_nogroup_recreates_the_group_at_its_start_logs_a_warning_and_counts_a_fault(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    app, broker = _app(redis_server.url)
    seen: list[int] = []
    first = trio.Event()
    second = trio.Event()

    @broker.subscriber(
        RedisStream("s", group="g", start=Position.beginning()), name="handle", block=50
    )
    async def handle(n: int) -> None:
        seen.append(n)
        (first if n == 1 else second).set()

    with caplog.at_level(logging.WARNING, logger="trio_streams.redis"):
        async with serving(app) as running:
            await broker.publish("s", 1)
            with trio.fail_after(10):
                await first.wait()
            await redis.execute("FLUSHALL")
            await broker.publish("s", 2)  # the stream again, without the group
            with trio.fail_after(10):
                await second.wait()
            assert running.stats()["handle"].faults >= 1
    assert seen == [1, 2]
    assert any("recreated" in r.getMessage() for r in caplog.records)


async def test_nogroup_under_on_nogroup_fail_fails_the_app_naming_the_group(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app, broker = _app(redis_server.url)
    source = RedisStream("s", group="g", on_nogroup="fail")

    @broker.subscriber(source, block=20)
    async def handle(n: int) -> None: ...

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await redis.execute("DEL", "s")
    [error] = failed.value.exceptions
    assert isinstance(error.__cause__, GroupVanished)
    assert "consumer group 'g' of stream 's' vanished" in str(error.__cause__)


def _cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@pytest.mark.slow
async def test_flushall_under_a_running_subscription_costs_under_5_percent_cpu_while_missing(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    consumer = Consumer(redis_server.url, "s", "g", "c1", 60, "ok")
    try:

        async def group_exists() -> bool:
            return bool(await redis.execute("EXISTS", "s"))

        await eventually(group_exists, within=20, what="the consumer's group")
        pid = consumer.process.pid
        before, started = _cpu_seconds(pid), trio.current_time()
        with trio.move_on_after(3):
            while True:  # the group keeps vanishing for three seconds
                await redis.execute("FLUSHALL")
                await trio.sleep(0.005)
        used = _cpu_seconds(pid) - before
        elapsed = trio.current_time() - started
        print(f"CPU while the group kept vanishing: {used / elapsed:.1%} over {elapsed:.1f}s")
        assert used / elapsed < 0.05, f"{used:.3f}s CPU in {elapsed:.2f}s"
        await redis.execute("XADD", "s", "*", "_payload", "7")
        await consumer.wait_line("handled 7")  # recreated, and consuming again
    finally:
        consumer.stop()


async def test_a_failed_xack_is_a_reported_fault_and_the_entries_are_redelivered_not_lost() -> None:
    rules = ("app", "on", ">pw", "~*", "&*", "+@all", "-xack")
    with start_redis_server("--user", *rules) as server:
        url = f"redis://app:pw@{server.host}:{server.port}"
        async with connect(server.url) as admin:
            for n in (1, 2):
                await admin.execute("XADD", "s", f"0-{n}", "_payload", str(n))
            app = App("svc")
            broker = app.broker(RedisBroker(url))
            seen: list[tuple[int, int]] = []
            source = RedisStream("s", group="g", start=Position.beginning(), min_idle=0.2)

            @broker.subscriber(source, name="sub", block=20, max_attempts=100)
            async def handle(n: int, ctx: Context) -> None:
                seen.append((n, ctx.attempt))

            async with serving(app) as running:

                async def flush_failed() -> bool:
                    await trio.lowlevel.checkpoint()
                    return "flush" in running.stats()["sub"].degraded

                await eventually(flush_failed, what="the failed XACK reported")
                assert await pending_count(admin, "s", "g") == 2  # kept, not lost
                await admin.execute("ACL", "SETUSER", "app", "+xack")

                async def settled() -> bool:
                    return bool(await pending_count(admin, "s", "g") == 0)

                await eventually(settled, within=20, what="the entries acknowledged")
                assert "flush" not in running.stats()["sub"].degraded
    assert {n for n, _ in seen} == {1, 2}
    assert max(attempt for _, attempt in seen) >= 2  # delivered again after the failure


async def test_a_restart_with_aof_under_load_loses_nothing_and_writes_one_retry_copy_each() -> None:
    # Four workers retry every original while the server restarts: settles, flushes and the
    # reader's own-pending reads race the restart. An entry acknowledged while its consumer's
    # pending list was being read must not come again (a second copy).
    with start_redis_server("--appendonly", "yes", "--appendfsync", "always") as server:
        app, broker = _app(server.url)
        originals: set[str] = set()
        copies_seen: set[int] = set()
        handled: list[tuple[int, int, str]] = []

        @broker.subscriber(RedisStream("s", group="g", consumer="c1", min_idle=1.0), workers=4)
        async def handle(n: int, ctx: Context) -> Outcome:
            assert ctx.position is not None
            await trio.sleep(0.001 * (n % 7))  # settles spread over the restart
            handled.append((n, ctx.attempt, ctx.position.entry_id))
            if RETRY_COUNT_HEADER not in ctx.message.headers:  # an original
                return retry()
            copies_seen.add(n)
            return ack()

        async with connect(server.url) as redis, serving(app):
            for n in range(100):
                originals.add(text(await redis.execute("XADD", "s", "*", "_payload", str(n))))
            await trio.to_thread.run_sync(server.restart)
            for n in range(100, 200):
                with trio.fail_after(10):
                    while True:
                        try:
                            entry_id = await redis.execute("XADD", "s", "*", "_payload", str(n))
                        except ConnectionError:
                            await trio.sleep(0.02)  # the server is still starting
                        else:
                            originals.add(text(entry_id))
                            break

            async def all_copies_handled() -> bool:
                await trio.lowlevel.checkpoint()
                return len(copies_seen) == 200

            await eventually(all_copies_handled, within=30, what="every retry copy handled")
            await eventually(lambda: _no_pending(redis), within=10, what="an empty PEL")
            stream = await entries(redis, "s")
    copies = Counter(int(f["_payload"]) for entry_id, f in stream if entry_id not in originals)
    assert sorted(copies) == list(range(200))  # nothing lost
    doubled = {n: c for n, c in copies.items() if c != 1}
    detail = [h for h in handled if h[0] in doubled]
    assert doubled == {}, (detail, [e for e in stream if int(e[1]["_payload"]) in doubled])


async def _no_pending(redis: RedisClient) -> bool:
    return await pending_count(redis, "s", "g") == 0
