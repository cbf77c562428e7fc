"""Redis lists against a real server: publishing, the simple form, the reliable form's
processing list and outcomes, refusals and wrong-type keys."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, AppFailed, Context, Destination, Outcome, drop, retry, retry_after
from trio_streams.core.delivery import RETRY_COUNT_HEADER, RETRY_TARGET_HEADER
from trio_streams.core.errors import ConfigurationError, UnsupportedError
from trio_streams.redis import RedisBroker, RedisList, WrongKeyType
from trio_streams.redis.client import RedisClient
from trio_streams.redis.delays import delay_key
from trio_streams.redis.frames import REDELIVERED_HEADER, decode_frame, encode_frame
from trio_streams.redis.lists import consumers_key, heartbeat_key, processing_key

from .support import frames, length, values


async def test_publish_to_a_list_pushes_one_frame_at_the_end_its_consumers_do_not_take_from(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pub")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisList("right", pop="right"))
    async def handle(n: int) -> None: ...

    async with serving(app):
        # No consumer runs on "jobs": pushed at the right (RPUSH), consumers pop the left.
        assert await broker.publish(Destination.list("jobs"), 1, headers={"trace": "t1"}) == 1
        await broker.publish(Destination.list("jobs"), 2)
    assert await frames(redis, "jobs") == [(b"1", {"trace": "t1"}), (b"2", {})]
    assert await values(redis, "jobs") == [encode_frame(b"1", {"trace": "t1"}), bytes(4) + b"2"]


@pytest.mark.parametrize("count", [1, 10], ids=["BLPOP", "BLMPOP"])
async def test_a_simple_list_pops_entries_in_the_order_they_were_pushed(
    redis_server: RedisServer, redis: RedisClient, count: int
) -> None:
    for n in range(1, 6):
        await redis.execute("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs"), count=count)
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 7:
            done.set()

    async with serving(app):
        await broker.publish(Destination.list("jobs"), 6)
        await broker.publish(Destination.list("jobs"), 7)
        with trio.fail_after(10):
            await done.wait()
    assert seen == [1, 2, 3, 4, 5, 6, 7]
    assert await length(redis, "jobs") == 0


async def test_a_raw_value_pushed_by_another_producer_delivers_as_a_headerless_payload(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("RPUSH", "jobs", b'{"id": 1}')
    await redis.execute("RPUSH", "jobs", b"\x00\x00\x00\x05no")  # a count past the end
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[bytes, dict[str, str]]] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True))
    async def handle(payload: bytes, ctx: Context) -> None:
        seen.append((payload, dict(ctx.headers)))
        if len(seen) == 2:
            done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
    assert seen == [(b'{"id": 1}', {}), (b"\x00\x00\x00\x05no", {})]


async def test_a_simple_list_retry_pushes_a_copy_with_the_retry_count_and_ack_or_drop_do_nothing(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    attempts: list[tuple[int, int]] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs"))
    async def handle(n: int, ctx: Context) -> object:
        attempts.append((n, ctx.attempt))
        if n == 1 and ctx.attempt == 1:
            return retry()
        if len(attempts) == 3:
            done.set()
        return drop() if n == 2 else None

    async with serving(app):
        await broker.publish(Destination.list("jobs"), 1)
        await broker.publish(Destination.list("jobs"), 2)
        with trio.fail_after(10):
            await done.wait()
    assert sorted(attempts) == [(1, 1), (1, 2), (2, 1)]
    assert await length(redis, "jobs") == 0


async def test_pipeline_on_a_simple_list_is_refused_at_mount() -> None:
    broker = RedisBroker("redis://127.0.0.1:1")
    with pytest.raises(UnsupportedError, match="pipeline=True needs a reliable list"):

        @broker.subscriber(RedisList("jobs"), pipeline=True)
        async def handle(n: int) -> None: ...


def test_a_consumer_name_belongs_to_a_reliable_list() -> None:
    with pytest.raises(ConfigurationError, match="belongs to a reliable list"):
        RedisList("jobs", consumer="w1")
    with pytest.raises(ConfigurationError, match="pop is 'left' or 'right'"):
        RedisList("jobs", pop="middle")


@pytest.mark.parametrize("reliable", [False, True], ids=["simple", "reliable"])
async def test_a_key_that_holds_another_type_fails_the_start_with_a_typed_error_naming_it(
    redis_server: RedisServer, redis: RedisClient, reliable: bool
) -> None:
    await redis.execute("SET", "jobs", "not a list")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisList("jobs", reliable=reliable))
    async def handle(n: int) -> None: ...

    with pytest.RaisesGroup(
        pytest.RaisesExc(WrongKeyType, match="key 'jobs' holds a string, not a list")
    ):
        async with serving(app):
            pass


async def test_a_publish_to_a_key_of_another_type_is_a_typed_error_naming_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("SET", "jobs", "not a list")
    app = App("pub")
    broker = app.broker(RedisBroker(redis_server.url))
    async with serving(app):
        with pytest.raises(WrongKeyType, match="key 'jobs' does not hold a list"):
            await broker.publish(Destination.list("jobs"), 1)


async def test_a_key_that_turns_into_another_type_while_read_fails_the_subscription_naming_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), block=20)
    async def handle(n: int) -> None: ...

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            await redis.execute("SET", "jobs", "not a list")
    [error] = failed.value.exceptions
    assert isinstance(error.__cause__, WrongKeyType)
    assert "key 'jobs' holds a string, not a list" in str(error.__cause__)


async def test_a_reliable_entry_waits_in_the_processing_list_until_its_ack_removes_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    handling = trio.Event()
    release = trio.Event()
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"))
    async def handle(n: int) -> None:
        handling.set()
        await release.wait()
        done.set()

    processing = processing_key("jobs", "w1")
    async with serving(app):
        assert await redis.execute("EXISTS", heartbeat_key("jobs", "w1")) == 1
        assert await redis.execute("SMEMBERS", consumers_key("jobs")) == [b"w1"]
        await broker.publish(Destination.list("jobs"), 7)
        with trio.fail_after(10):
            await handling.wait()
        assert await values(redis, processing) == [bytes(4) + b"7"]
        assert await length(redis, "jobs") == 0
        release.set()
        await done.wait()

        async def emptied() -> bool:
            return await length(redis, processing) == 0

        await eventually(emptied, what="the ack's LREM")
    # A graceful stop removes the heartbeat and the consumer's name.
    assert await redis.execute("EXISTS", heartbeat_key("jobs", "w1")) == 0
    assert await redis.execute("SMEMBERS", consumers_key("jobs")) == []


async def test_a_reliable_retry_pushes_a_copy_and_removes_the_original_in_one_transaction(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[int, dict[str, str]]] = []
    on_the_wire: list[tuple[bytes, dict[str, str]]] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"))
    async def handle(n: int, ctx: Context) -> object:
        seen.append((ctx.attempt, dict(ctx.headers)))
        if ctx.attempt == 1:
            return retry()
        on_the_wire.extend(await frames(redis, processing_key("jobs", "w1")))
        done.set()
        return None

    async with serving(app):
        await broker.publish(Destination.list("jobs"), 1, headers={"trace": "t"})
        with trio.fail_after(10):
            await done.wait()
    # The handler sees the producer's headers; the copy carries the count and the target.
    assert seen == [(1, {"trace": "t"}), (2, {"trace": "t"})]
    assert on_the_wire == [
        (b"1", {"trace": "t", RETRY_COUNT_HEADER: "1", RETRY_TARGET_HEADER: "list:jobs"})
    ]
    assert await length(redis, processing_key("jobs", "w1")) == 0
    assert await length(redis, "jobs") == 0


async def test_retry_after_on_a_reliable_list_is_durable_in_the_delay_set_then_pushed_back(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    attempts: list[int] = []
    scheduled = trio.Event()
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"))
    async def handle(n: int, ctx: Context) -> object:
        attempts.append(ctx.attempt)
        if ctx.attempt == 1:
            scheduled.set()
            return retry_after(0.3)
        done.set()
        return None

    async with serving(app):
        await broker.publish(Destination.list("jobs"), 1)
        with trio.fail_after(10):
            await scheduled.wait()

        async def in_the_delay_set() -> bool:
            return (
                await redis.execute("ZCARD", delay_key("jobs")) == 1
                and await length(redis, processing_key("jobs", "w1")) == 0
            )

        await eventually(in_the_delay_set, what="the copy in the ZSET, the original gone")
        with trio.fail_after(10):
            await done.wait()
    assert attempts == [1, 2]
    assert await redis.execute("ZCARD", delay_key("jobs")) == 0


@pytest.mark.parametrize("kind", ["list", "stream"])
async def test_a_dead_letter_carries_the_reason_headers_and_the_original_is_removed(
    redis_server: RedisServer, redis: RedisClient, kind: str
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    calls = 0

    @broker.subscriber(
        RedisList("jobs", reliable=True, consumer="w1", dead_letter_kind=kind),
        max_attempts=2,
        dead_letter="jobs.dead",
    )
    async def handle(n: int) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("nope")

    async def dead_lettered() -> bool:
        found = await redis.execute("TYPE", "jobs.dead")
        return bool(found == (b"list" if kind == "list" else b"stream"))

    async with serving(app):
        await broker.publish(Destination.list("jobs"), 5, headers={"trace": "t"})
        await eventually(dead_lettered, within=10, what="the dead letter")
        await eventually(
            lambda: _empty(redis, processing_key("jobs", "w1")), what="the original removed"
        )
    if kind == "list":
        [(payload, headers)] = await frames(redis, "jobs.dead")
    else:
        [[_, fields]] = await redis.execute("XRANGE", "jobs.dead", "-", "+")
        pairs = dict(zip(fields[::2], fields[1::2], strict=True))
        payload = pairs[b"_payload"]
        headers = {k.decode()[2:]: v.decode() for k, v in pairs.items() if k != b"_payload"}
    assert payload == b"5"
    assert headers["trace"] == "t"
    assert headers["x-dead-letter-reason"] == "max-attempts"
    assert headers["x-dead-letter-attempts"] == "2"
    assert headers["x-dead-letter-error"] == "ValueError: nope"
    assert headers["x-dead-letter-stream"] == "jobs"
    assert calls == 2
    assert await length(redis, "jobs") == 0


async def _empty(redis: RedisClient, key: str) -> bool:
    return await length(redis, key) == 0


async def test_a_list_popped_from_the_right_is_published_on_the_left(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, pop="right"), count=5)
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 3:
            done.set()

    async with serving(app):
        for n in (1, 2, 3):
            await broker.publish(Destination.list("jobs"), n)
        with trio.fail_after(10):
            await done.wait()
    assert seen == [1, 2, 3]
    assert await length(redis, "jobs") == 0


async def test_a_graceful_stop_puts_what_was_not_settled_back_at_the_front_of_the_list(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc", shutdown_timeout=0.2)
    broker = app.broker(RedisBroker(redis_server.url))
    started = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), count=3)
    async def handle(n: int) -> None:
        started.set()
        await trio.sleep_forever()  # abandoned at shutdown

    for n in (1, 2, 3):
        await redis.execute("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    async with serving(app):
        with trio.fail_after(10):
            await started.wait()
        await redis.execute("RPUSH", "jobs", encode_frame(b"4", {}))
    assert [p for p, _ in await frames(redis, "jobs")] == [b"1", b"2", b"3", b"4"]
    assert await length(redis, processing_key("jobs", "w1")) == 0


@pytest.mark.parametrize("kind", ["list", "stream"])
async def test_a_dead_letter_whose_write_fails_leaves_the_original_in_the_processing_list(
    redis_server: RedisServer, redis: RedisClient, kind: str
) -> None:
    # MULTI/EXEC would run the LREM after the failed write (Redis has no rollback): the entry
    # would be gone while its letter was never written.
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    tried = trio.Event()

    @broker.subscriber(
        RedisList("jobs", reliable=True, consumer="w1", dead_letter_kind=kind),
        name="sub",
        max_attempts=1,
        dead_letter="jobs.dead",
    )
    async def handle(n: int) -> None:
        tried.set()
        raise ValueError("nope")

    async with serving(app) as running:
        # Of another type once the start, which refuses it, is over.
        await redis.execute("SET", "jobs.dead", "another type")
        await broker.publish(Destination.list("jobs"), 5)
        with trio.fail_after(10):
            await tried.wait()

        async def faulted() -> bool:
            return running.stats()["sub"].faults >= 1

        await eventually(faulted, what="the failed dead letter reported as a fault")
        assert await values(redis, processing_key("jobs", "w1")) == [bytes(4) + b"5"]
    assert await redis.execute("GET", "jobs.dead") == b"another type"
    # Nothing lost: the graceful close put the entry back on the list, with its one run.
    assert await values(redis, "jobs") == [encode_frame(b"5", {REDELIVERED_HEADER: "1"})]


async def test_a_retry_whose_push_fails_leaves_the_original_in_the_processing_list(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), block=20)
    async def handle(n: int) -> Outcome:
        # The list turns into another type under the handler: the copy cannot be pushed.
        await redis.execute("SET", "jobs", "another type")
        return retry()

    await redis.execute("RPUSH", "jobs", bytes(4) + b"5")
    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)), trio.fail_after(10):
        async with serving(app):
            await trio.sleep_forever()
    assert await values(redis, processing_key("jobs", "w1")) == [bytes(4) + b"5"]
    assert await redis.execute("GET", "jobs") == b"another type"


@pytest.mark.parametrize(
    ("key", "kind"),
    [("{jobs}:consumers", "set"), ("{jobs}:delayed", "zset"), ("{jobs}:processing:w1", "list")],
)
async def test_a_companion_key_of_another_type_fails_the_start_with_a_typed_error_naming_it(
    redis_server: RedisServer, redis: RedisClient, key: str, kind: str
) -> None:
    await redis.execute("SET", key, "another type")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"))
    async def handle(n: int) -> None: ...

    with pytest.RaisesGroup(
        pytest.RaisesExc(WrongKeyType, match=f"key '{key}' holds a string, not a {kind}")
    ):
        async with serving(app):
            pass


async def test_a_delay_set_that_turns_into_another_type_while_running_fails_the_subscription(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    # Each failed schedule leaves the entry to be handled again (a run each: an attempt), so
    # a cap it cannot reach first keeps this about the subscription failing.
    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), block=20, max_attempts=1000)
    async def handle(n: int) -> Outcome:
        await redis.execute("SET", delay_key("jobs"), "another type")
        return retry_after(0.01)

    await redis.execute("RPUSH", "jobs", bytes(4) + b"5")
    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(10):
        async with serving(app):
            await trio.sleep_forever()
    [error] = failed.value.exceptions
    assert isinstance(error.__cause__, WrongKeyType)
    assert "'{jobs}:delayed' holds a string, not a zset" in str(error.__cause__)
    # The copy could not be scheduled, so the original stayed; the close put it back, with
    # the runs its handler made.
    [back] = await values(redis, "jobs")
    payload, headers = decode_frame(back)
    assert payload == b"5" and int(headers[REDELIVERED_HEADER]) >= 1


@pytest.mark.parametrize("count", [1, 10], ids=["BLPOP", "BLMPOP"])
async def test_a_graceful_stop_of_a_simple_list_loses_nothing_while_a_producer_pushes(
    redis_server: RedisServer, redis: RedisClient, count: int
) -> None:
    # The stop cancels a blocking pop the server may already have answered, and lets go of
    # what was popped and queued: both go back to the front of the list.
    for attempt in range(5):
        key = f"jobs{attempt}"
        pushed, handled = await _stop_while_pushing(redis_server, redis, key, count)
        left = [int(payload) for payload, _ in await frames(redis, key)]
        assert set(range(pushed)) == handled | set(left), f"stop {attempt}"
        assert left == sorted(left)  # what went back is in the order it was pushed


async def _stop_while_pushing(
    redis_server: RedisServer, redis: RedisClient, key: str, count: int
) -> tuple[int, set[int]]:
    """Stop a simple list's consumer while a producer pushes: how many were pushed, and which
    were handled."""
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    handled: set[int] = set()
    busy = trio.Event()

    @broker.subscriber(RedisList(key), count=count, block=20)
    async def handle(n: int) -> None:
        handled.add(n)
        if len(handled) >= 30:
            busy.set()

    pushed = 0
    pushing = True

    async def push() -> None:
        nonlocal pushed
        while pushing:
            await redis.execute("RPUSH", key, encode_frame(str(pushed).encode(), {}))
            pushed += 1

    async with trio.open_nursery() as nursery:
        async with serving(app):
            nursery.start_soon(push)
            with trio.fail_after(10):
                await busy.wait()
        pushing = False
    return pushed, handled
