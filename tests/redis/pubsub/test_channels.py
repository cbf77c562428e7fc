"""Redis Pub/Sub subscriptions (``RedisChannel``) on a real server: delivery, frames, patterns,
fan-out, settles, gaps across a restart, and what is refused at mount."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from tests.support import serving
from trio_streams import (
    RETRY_COUNT_HEADER,
    RETRY_TARGET_HEADER,
    App,
    Context,
    Destination,
    Headers,
    HealthState,
    Outcome,
    Seeker,
    ack,
    retry,
    retry_after,
)
from trio_streams.core.errors import ConfigurationError, UnsupportedError
from trio_streams.redis import RedisBroker, RedisChannel, RedisStream
from trio_streams.redis.client import Message, RedisClient
from trio_streams.redis.frames import decode_frame, encode_frame

from .support import serving_with_faults

NEWS = Destination.channel("news")


async def test_a_subscriber_receives_what_is_published_after_it_subscribed_with_its_headers(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("PUBLISH", "news", encode_frame(b"0", {}))  # before: nobody hears it
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[int, str, dict[str, str]]] = []
    got = trio.Event()

    @broker.subscriber(RedisChannel("news"), name="news")
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.stream, dict(ctx.headers)))
        got.set()

    async with serving(app):
        receivers = await broker.publish(NEWS, 1, headers={"trace-id": "t1"})
        with trio.fail_after(10):
            await got.wait()
    assert receivers == 1  # PUBLISH's count of the subscribers that received it
    assert seen == [(1, "news", {"trace-id": "t1"})]


async def test_a_message_is_published_as_the_list_and_pubsub_frame(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    async with redis.subscribe(["news"]) as raw, serving(app):
        await broker.publish(NEWS, {"id": 1}, headers={"k": "v"})
        with trio.fail_after(10):
            message = await anext(raw)
    assert isinstance(message, Message)
    assert message.data == encode_frame(b'{"id":1}', {"k": "v"})


async def test_a_raw_message_from_another_client_delivers_as_a_headerless_payload(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[bytes, dict[str, str], int]] = []
    got = trio.Event()

    @broker.subscriber(RedisChannel("news"))
    async def handle(payload: bytes, headers: Headers, ctx: Context) -> None:
        seen.append((payload, dict(headers), ctx.attempt))
        got.set()

    async with serving(app):
        await redis.execute("PUBLISH", "news", "hello")  # not a frame
        with trio.fail_after(10):
            await got.wait()
    assert seen == [(b"hello", {}, 1)]


async def test_every_subscriber_of_a_channel_receives_each_message(
    redis_server: RedisServer,
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    other = App("other")
    other_broker = other.broker(RedisBroker(redis_server.url))
    seen: dict[str, list[int]] = {}
    all_done = trio.Event()

    def note(who: str, n: int) -> None:
        seen.setdefault(who, []).append(n)
        if sum(len(v) for v in seen.values()) == 4 * 3:
            all_done.set()

    for who in ("a", "b", "c"):

        @broker.subscriber(RedisChannel("news"), name=who)
        async def handle(n: int, who: str = who) -> None:
            note(who, n)

    @other_broker.subscriber(RedisChannel("news"), name="d")
    async def elsewhere(n: int) -> None:
        note("d", n)

    async with serving(app), serving(other):
        receipts = [await broker.publish(NEWS, n) for n in (1, 2, 3)]
        with trio.fail_after(10):
            await all_done.wait()
    assert receipts == [4, 4, 4]
    assert seen == {who: [1, 2, 3] for who in "abcd"}


async def test_a_pattern_subscription_receives_every_matching_channel_and_names_it(
    redis_server: RedisServer,
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[str, int]] = []
    got = trio.Event()

    @broker.subscriber(RedisChannel("news.*", "alerts.[0-9]", pattern=True))
    async def handle(n: int, ctx: Context) -> None:
        seen.append((ctx.stream, n))
        if n == 5:
            got.set()

    async with serving(app):
        for name, n in [("news.eu", 1), ("sport", 2), ("alerts.7", 3), ("alerts.x", 4)]:
            await broker.publish(Destination.channel(name), n)
        await broker.publish(Destination.channel("news.us"), 5)
        with trio.fail_after(10):
            await got.wait()
    assert seen == [("news.eu", 1), ("alerts.7", 3), ("news.us", 5)]


async def test_retry_republishes_a_copy_with_the_retry_count_that_only_the_asker_handles(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    asked: list[tuple[int, int]] = []
    other: list[tuple[int, int]] = []
    retried = trio.Event()
    other_got_2 = trio.Event()

    @broker.subscriber(RedisChannel("news.*", pattern=True), name="asks")
    async def asks(n: int, ctx: Context) -> Outcome:
        asked.append((n, ctx.attempt))
        if ctx.attempt == 2:
            retried.set()
        return retry() if ctx.attempt == 1 else ack()

    @broker.subscriber(RedisChannel("news.eu"), name="other")
    async def passes_over(n: int, ctx: Context) -> None:
        other.append((n, ctx.attempt))
        if n == 2:
            other_got_2.set()

    async with redis.subscribe(["news.eu"]) as raw, serving(app):
        await broker.publish(Destination.channel("news.eu"), 1)
        with trio.fail_after(10):
            await retried.wait()
        await broker.publish(Destination.channel("news.eu"), 2)
        with trio.fail_after(10):
            await other_got_2.wait()
            frames = [await anext(raw) for _ in range(3)]
    assert asked[:2] == [(1, 1), (1, 2)]
    assert other == [(1, 1), (2, 1)]
    copy = frames[1]
    assert isinstance(copy, Message) and copy.channel == b"news.eu"  # the channel it came on
    payload, headers = decode_frame(copy.data)
    assert payload == b"1"
    assert headers == {RETRY_COUNT_HEADER: "1", RETRY_TARGET_HEADER: "svc/asks"}


async def test_retry_after_is_held_by_the_process_then_republished(
    redis_server: RedisServer,
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    attempts: list[int] = []
    again = trio.Event()

    @broker.subscriber(RedisChannel("news"), name="sub")
    async def handle(n: int, ctx: Context) -> Outcome:
        attempts.append(ctx.attempt)
        if ctx.attempt == 2:
            again.set()
            return ack()
        return retry_after(0.05)

    async with serving(app):
        await broker.publish(NEWS, 1)
        with trio.fail_after(10):
            await again.wait()
    assert attempts == [1, 2]


@pytest.mark.parametrize("sharded", [False, True], ids=["PUBLISH", "SPUBLISH"])
async def test_a_spent_message_is_dead_lettered_as_a_copy_published_to_the_dead_letter_channel(
    redis_server: RedisServer, redis: RedisClient, sharded: bool
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    spent = trio.Event()

    @broker.subscriber(
        RedisChannel("news", sharded=sharded), name="sub", max_attempts=2, dead_letter="news.dead"
    )
    async def handle(n: int, ctx: Context) -> None:
        if ctx.attempt == 2:
            spent.set()
        raise ValueError(f"cannot handle {n}")

    subscribing = (
        redis.subscribe(shard_channels=["news.dead"]) if sharded else redis.subscribe(["news.dead"])
    )
    async with subscribing as letters, serving(app):
        await broker.publish(Destination.channel("news", sharded=sharded), 7, headers={"t": "7"})
        with trio.fail_after(10):
            await spent.wait()
            letter = await anext(letters)
    assert isinstance(letter, Message) and letter.channel == b"news.dead"
    payload, headers = decode_frame(letter.data)
    assert payload == b"7"
    assert headers["t"] == "7"
    assert headers["x-dead-letter-reason"] == "max-attempts"
    assert headers["x-dead-letter-stream"] == "news"
    assert headers["x-dead-letter-error"] == "ValueError: cannot handle 7"
    assert RETRY_TARGET_HEADER not in headers and RETRY_COUNT_HEADER not in headers
    assert await redis.execute("EXISTS", "news.dead") == 0  # nothing kept: a channel


async def test_with_dead_letter_kind_stream_a_spent_message_is_kept_in_that_stream_with_why(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    spent = trio.Event()

    @broker.subscriber(
        RedisChannel("news", dead_letter_kind="stream"),
        name="sub",
        max_attempts=2,
        dead_letter="news.dead",
    )
    async def handle(n: int, ctx: Context) -> None:
        if ctx.attempt == 2:
            spent.set()
        raise ValueError(f"cannot handle {n}")

    async with serving(app):
        await broker.publish(NEWS, 7, headers={"trace-id": "t7"})
        with trio.fail_after(10):
            await spent.wait()

            async def lettered() -> bool:
                return bool(await redis.execute("XLEN", "news.dead"))

            await eventually(lettered, what="the dead letter")
    [[_, fields]] = await redis.execute("XRANGE", "news.dead", "-", "+")
    got = {fields[i].decode(): fields[i + 1].decode() for i in range(0, len(fields), 2)}
    assert got["_payload"] == "7"
    assert got["h:trace-id"] == "t7"
    assert got["h:x-dead-letter-reason"] == "max-attempts"
    assert got["h:x-dead-letter-stream"] == "news"
    assert got["h:x-dead-letter-error"] == "ValueError: cannot handle 7"
    assert "h:" + RETRY_TARGET_HEADER not in got


async def test_a_sharded_channel_is_read_with_ssubscribe_and_apart_from_classic_channels(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[str, int]] = []
    got = trio.Event()

    @broker.subscriber(RedisChannel("orders", sharded=True), name="sharded")
    async def sharded(n: int) -> None:
        seen.append(("sharded", n))
        if n == 2:
            got.set()

    @broker.subscriber(RedisChannel("orders"), name="classic")
    async def classic(n: int) -> None:
        seen.append(("classic", n))

    async with serving(app):
        assert await redis.execute("PUBSUB", "SHARDNUMSUB", "orders") == [b"orders", 1]
        assert await broker.publish(Destination.channel("orders", sharded=True), 1) == 1
        await redis.execute("SPUBLISH", "orders", "2")  # a raw shard message, too
        with trio.fail_after(10):
            await got.wait()
    assert seen == [("sharded", 1), ("sharded", 2)]  # the classic subscriber heard neither


async def test_a_server_restart_is_one_gap_reported_with_when_and_how_long_then_delivery_resumes(
    redis_server: RedisServer,
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + "?backoff_initial=0.01&backoff_cap=0.1"))
    seen: list[int] = []
    first = trio.Event()
    after = trio.Event()

    @broker.subscriber(RedisChannel("news"), name="news")
    async def handle(n: int) -> None:
        seen.append(n)
        (first if n == 1 else after).set()

    async with serving_with_faults(app) as served:
        running = served.running
        await broker.publish(NEWS, 1)
        with trio.fail_after(10):
            await first.wait()
        await trio.to_thread.run_sync(redis_server.kill)
        with trio.fail_after(10):
            await running.health.wait_value(lambda h: h.state is HealthState.DEGRADED)
        assert running.health.value.state is HealthState.DEGRADED  # deaf while it is down
        await trio.to_thread.run_sync(redis_server.start)
        with trio.fail_after(10):
            await running.health.wait_value(lambda h: h.state is HealthState.RUNNING)
        assert await broker.publish(NEWS, 2) == 1  # subscribed again
        with trio.fail_after(10):
            await after.wait()
        source = served.source("news")
        assert source.gaps == 1
        assert source.last_gap is not None and source.missed_seconds > 0
    assert seen == [1, 2]
    began = [(f.kind, f.cleared) for f in served.faults]
    assert began == [
        ("connection", False),
        ("gap", False),
        ("gap", True),
        ("connection", True),
    ]
    gap = served.faults[1]
    assert "missed what was published to channel 'news' for " in gap.message
    assert " s, from 20" in gap.message and "Z to 20" in gap.message  # when, in UTC
    assert "gap 1 of this subscription" in gap.message
    assert running.stats()["news"].faults == 2  # the loss, and the gap: each once


async def test_refused_at_mount_pipeline_block_and_seeking(redis_server: RedisServer) -> None:
    broker = RedisBroker(redis_server.url)
    with pytest.raises(UnsupportedError, match="pipeline=True needs something to acknowledge"):
        broker.subscriber(RedisChannel("news"), pipeline=True)(_noop)
    with pytest.raises(UnsupportedError, match="block= bounds a blocking stream read"):
        broker.subscriber(RedisChannel("news"), block=100)(_noop)

    async def seeks(n: int, seeker: Seeker) -> None: ...

    with pytest.raises(UnsupportedError, match=r"RedisChannel\('news'\) cannot seek"):
        broker.subscriber(RedisChannel("news"))(seeks)
    with pytest.raises(ConfigurationError, match="no sharded patterns"):
        RedisChannel("a.*", pattern=True, sharded=True)
    with pytest.raises(ConfigurationError, match="at least one channel"):
        RedisChannel()
    broker.subscriber(RedisStream("news"))(_noop)  # a stream of the same name is another thing


async def _noop(n: int) -> None: ...


async def test_a_dead_letter_that_cannot_be_published_is_the_fault_dead_letter_and_goes_on() -> (
    None
):
    # The user may publish to "news" (retries) but not to "news.dead".
    rules = ("app", "on", ">pw", "~*", "resetchannels", "&news", "+@all")
    with start_redis_server("--user", *rules) as server:
        app = App("svc")
        broker = app.broker(RedisBroker(f"redis://app:pw@{server.host}:{server.port}"))
        seen: list[int] = []
        second = trio.Event()

        @broker.subscriber(
            RedisChannel("news"), name="sub", max_attempts=1, dead_letter="news.dead"
        )
        async def handle(n: int) -> None:
            seen.append(n)
            if n == 2:
                second.set()
                return
            raise ValueError("nope")

        async with serving(app) as running:
            await broker.publish(NEWS, 1)

            async def faulted() -> bool:
                await trio.lowlevel.checkpoint()
                return running.stats()["sub"].faults >= 1

            await eventually(faulted, what="the failed dead letter reported")
            await broker.publish(NEWS, 2)
            with trio.fail_after(10):
                await second.wait()
    assert seen == [1, 2]
