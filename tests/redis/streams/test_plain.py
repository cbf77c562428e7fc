"""Plain streams (no group): replays that end, tails that follow, seeks, retention."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from tests.support import serving
from trio_streams import App, Context, Outcome, Position, RunningApp, Seeker, ack, retry
from trio_streams.core.errors import ConfigurationError
from trio_streams.core.transport import SeekRefused
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient

from .support import entries, pending_count


async def preload(redis: RedisClient, count: int, *, ms: int = 0) -> None:
    for n in range(1, count + 1):
        await redis.execute("XADD", "s", f"{ms + n}-0", "_payload", str(n))


async def run_to_end(app: App) -> RunningApp:
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            await running.wait_stopped()
    return running


async def test_a_replay_reads_from_the_beginning_to_the_tip_and_ends(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, 25)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[int, Position | None]] = []

    @broker.subscriber(RedisStream("s").replay(), name="replay", count=10)
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.position))

    running = await run_to_end(app)
    assert [n for n, _ in seen] == list(range(1, 26))
    assert seen[0][1] == Position.entry("1-0", stream="s")
    assert running.subscriptions["replay"].value == "ended"


async def test_a_replay_reads_a_retry_copy_appended_before_it_ends(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, 2)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[int, int]] = []

    @broker.subscriber(RedisStream("s").replay())
    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append((n, ctx.attempt))
        return retry() if (n, ctx.attempt) == (1, 1) else ack()

    await run_to_end(app)
    assert seen == [(1, 1), (2, 1), (1, 2)]


async def test_a_tail_follows_from_the_tip(redis_server: RedisServer, redis: RedisClient) -> None:
    await preload(redis, 3)  # before the tip: never delivered
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    got = trio.Event()

    @broker.subscriber(RedisStream("s").tail(), block=50)
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 2:
            got.set()

    async with serving(app):
        await broker.publish("s", 4)
        await broker.publish("s", 5)
        with trio.fail_after(10):
            await got.wait()
    assert seen == [4, 5]
    assert await redis.execute("XINFO", "GROUPS", "s") == []  # no group, nothing to ack


@pytest.mark.parametrize(
    ("position", "expected"),
    [
        (Position.beginning(), [1, 2, 3, 4, 5]),
        (Position.entry("3-0"), [3, 4, 5]),  # inclusive
        (Position.timestamp(3), [4, 5]),  # the first entry strictly later
        (Position.end(), []),
    ],
    ids=["beginning", "entry", "timestamp", "end"],
)
async def test_a_handler_seeks_a_replay_by_the_seeking_contract(
    redis_server: RedisServer, redis: RedisClient, position: Position, expected: list[int]
) -> None:
    await preload(redis, 5)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    sought = False

    @broker.subscriber(RedisStream("s").replay(), count=1)
    async def handle(n: int, seeker: Seeker) -> None:
        nonlocal sought
        seen.append(n)
        if n == 5 and not sought:
            sought = True
            await seeker.seek(position)

    await run_to_end(app)
    assert seen == [1, 2, 3, 4, 5, *expected]


async def test_a_sequence_seek_is_refused_naming_why(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, 2)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    refusals: list[str] = []

    @broker.subscriber(RedisStream("s").replay())
    async def handle(n: int, seeker: Seeker) -> None:
        if n == 1:
            with pytest.raises(SeekRefused) as refused:
                await seeker.seek(Position.sequence(1))
            refusals.append(str(refused.value))

    await run_to_end(app)
    [refusal] = refusals
    assert "addressed by id" in refusal


def test_a_plain_stream_takes_no_group() -> None:
    with pytest.raises(ConfigurationError, match="without a consumer group"):
        RedisStream("s", group="g").replay()


async def test_delete_on_ack_deletes_acknowledged_entries_with_the_xack(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, 4)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    done = trio.Event()
    seen: list[int] = []

    source = RedisStream("s", group="g", start=Position.beginning(), delete_on_ack=True)

    @broker.subscriber(source, block=50)
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 4:
            done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()

        async def gone() -> bool:
            return bool(await redis.execute("XLEN", "s") == 0)

        await eventually(gone, what="the acknowledged entries deleted")
        assert await pending_count(redis, "s", "g") == 0
    assert await entries(redis, "s") == []


async def test_without_delete_on_ack_xack_deletes_nothing(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await preload(redis, 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    done = trio.Event()
    seen: list[int] = []

    @broker.subscriber(RedisStream("s", group="g", start=Position.beginning()), block=50)
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 3:
            done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
    assert await redis.execute("XLEN", "s") == 3


async def test_a_tail_reconnects_as_a_fault_and_resumes_after_the_last_entry_it_read() -> None:
    with start_redis_server("--appendonly", "yes", "--appendfsync", "always") as server:
        app = App("svc")
        broker = app.broker(RedisBroker(server.url))
        seen: list[int] = []
        changed = trio.Event()

        @broker.subscriber(RedisStream("s").tail(), name="tail", block=50)
        async def handle(n: int) -> None:
            seen.append(n)
            changed.set()

        async def wait_for(count: int) -> None:
            nonlocal changed
            with trio.fail_after(20):
                while len(seen) < count:
                    await changed.wait()
                    changed = trio.Event()

        async with serving(app) as running:
            await broker.publish("s", 1)
            await broker.publish("s", 2)
            await wait_for(2)
            await trio.to_thread.run_sync(server.restart)

            async def published() -> bool:
                try:
                    await broker.publish("s", 3)
                except ConnectionError:
                    return False
                return True

            await eventually(published, within=20, what="a publish after the restart")
            await wait_for(3)
            assert running.stats()["tail"].faults >= 1
    assert seen == [1, 2, 3]


async def test_under_app_test_a_replay_runs_in_memory_and_seeks_the_same_way() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))
    seen: list[int] = []

    @broker.subscriber(RedisStream("s").replay())
    async def handle(n: int, seeker: Seeker) -> None:
        seen.append(n)
        if n == 3 and seen.count(3) == 1:
            await seeker.seek(Position.beginning())

    async with app.test() as t:
        for n in (1, 2, 3):
            await t.publish("s", n)
    assert seen == [1, 2, 3, 1, 2, 3]


async def test_publish_trims_by_minid_when_asked(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "s", "5-0", "_payload", "old")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url, minid="10-0", exact_trim=True))
    async with serving(app):
        await broker.publish("s", 1)
    assert [f["_payload"] for _, f in await entries(redis, "s")] == [b"1"]
