"""``RedisChannel`` under ``app.test()``: the in-process bus routes as the server does (patterns
by the server's glob rules, checked against the server itself), keeps channels apart from
streams, and settles and refuses as the live transport does."""

from __future__ import annotations

import pytest
import trio

from tests.redis_servers import RedisServer
from trio_streams import (
    RETRY_COUNT_HEADER,
    RETRY_TARGET_HEADER,
    App,
    Context,
    Destination,
    Headers,
    Outcome,
    ack,
    retry,
)
from trio_streams.core.errors import UnsupportedError
from trio_streams.memory.channels import glob_match
from trio_streams.redis import RedisBroker, RedisChannel, RedisStream
from trio_streams.redis.client import Message, RedisClient

PATTERNS = [
    "*",
    "news.*",
    "news.?",
    "n*s",
    "*.*.*",
    "a[bc]d",
    "a[^bc]d",
    "a[b-d]d",
    "a[d-b]d",
    "a[\\]]d",
    "a\\*d",
    "a\\?d",
    "a[",
    "a[bc",
    "a[b-",
    "**x",
    "\\",
    "x\\",
    "[]]",
    "[^]]x",
    "caf?",
    "caf??",
    "h*llo*",
]
CHANNELS = [
    "news.eu",
    "news.e",
    "news",
    "ns",
    "a.b.c",
    "abd",
    "acd",
    "add",
    "aed",
    "a]d",
    "a*d",
    "a?d",
    "a[",
    "a[bc",
    "ab",
    "ac",
    "a-",
    "xx",
    "x",
    "\\",
    "x\\",
    "]",
    "ax",
    "]x",
    "café",
    "hello",
    "heeello.world",
]


async def test_the_in_process_glob_matches_exactly_what_the_server_matches(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    heard: set[tuple[str, str]] = set()
    async with redis.subscribe(patterns=PATTERNS) as raw:
        for channel in CHANNELS:
            await redis.execute("PUBLISH", channel, "x")
        await redis.execute("PUBLISH", "end-of-test", "x")  # matched by "*" only, last
        with trio.fail_after(10):
            async for item in raw:
                assert isinstance(item, Message) and item.pattern is not None
                if item.channel == b"end-of-test":
                    break
                heard.add((item.pattern.decode(), item.channel.decode()))
    matched = {(p, c) for p in PATTERNS for c in CHANNELS if glob_match(p, c)}
    assert matched == heard


def sub_app() -> tuple[App, RedisBroker]:
    app = App("svc")
    return app, app.broker(RedisBroker("redis://127.0.0.1:1"))  # never connected in a test


async def test_under_app_test_a_publish_reaches_every_matching_pattern_subscription() -> None:
    app, broker = sub_app()
    seen: dict[str, list[tuple[str, int]]] = {"eu": [], "all": [], "exact": [], "shard": []}

    @broker.subscriber(RedisChannel("news.e?", pattern=True), name="eu")
    async def eu(n: int, ctx: Context) -> None:
        seen["eu"].append((ctx.stream, n))

    @broker.subscriber(RedisChannel("news.*", "sport.[0-9]", pattern=True), name="all")
    async def every(n: int, ctx: Context) -> None:
        seen["all"].append((ctx.stream, n))

    @broker.subscriber(RedisChannel("news.us"), name="exact")
    async def exact(n: int, ctx: Context) -> None:
        seen["exact"].append((ctx.stream, n))

    @broker.subscriber(RedisChannel("news.us", sharded=True), name="shard")
    async def shard(n: int, ctx: Context) -> None:
        seen["shard"].append((ctx.stream, n))

    async with app.test() as t:
        receipts = [
            await t.publish(Destination.channel("news.eu"), 1),
            await t.publish(Destination.channel("news.us"), 2),
            await t.publish(Destination.channel("sport.7"), 3),
            await t.publish(Destination.channel("sport.x"), 4, unread_ok=True),  # none matches
            await t.publish(Destination.channel("news.us", sharded=True), 5),
        ]
    assert seen == {
        "eu": [("news.eu", 1)],
        "all": [("news.eu", 1), ("news.us", 2), ("sport.7", 3)],
        "exact": [("news.us", 2)],
        "shard": [("news.us", 5)],  # sharded channels are apart, as on the server
    }
    assert receipts == [2, 2, 1, 0, 1]  # as PUBLISH counts the subscribers that received it


async def test_under_app_test_a_channel_and_a_stream_of_the_same_name_never_meet() -> None:
    app, broker = sub_app()
    seen: list[tuple[str, int]] = []

    @broker.subscriber(RedisChannel("orders"), name="channel")
    async def channel(n: int) -> None:
        seen.append(("channel", n))

    @broker.subscriber(RedisStream("orders"), name="stream")
    async def stream(n: int) -> None:
        seen.append(("stream", n))

    async with app.test() as t:
        await t.publish("orders", 1)
        await t.publish(Destination.channel("orders"), 2)
        assert [m.json() for m in t.published("orders")] == [1]
        assert [m.json() for m in t.published(Destination.channel("orders"))] == [2]
    assert seen == [("stream", 1), ("channel", 2)]


async def test_under_app_test_retry_republishes_a_copy_only_the_asker_handles() -> None:
    app, broker = sub_app()
    asked: list[tuple[int, int]] = []
    other: list[tuple[int, int]] = []

    @broker.subscriber(RedisChannel("news.*", pattern=True), name="asks")
    async def asks(n: int, ctx: Context) -> Outcome:
        asked.append((n, ctx.attempt))
        return retry() if ctx.attempt == 1 else ack()

    @broker.subscriber(RedisChannel("news.eu"), name="other")
    async def passes_over(n: int, ctx: Context) -> None:
        other.append((n, ctx.attempt))

    async with app.test() as t:
        await t.publish(Destination.channel("news.eu"), 1)
        [original, copy] = t.published(Destination.channel("news.eu"))
    assert asked == [(1, 1), (1, 2)]
    assert other == [(1, 1)]
    assert original.headers == {}
    assert copy.headers == {RETRY_COUNT_HEADER: "1", RETRY_TARGET_HEADER: "svc/asks"}


async def test_under_app_test_a_subscriber_hears_only_what_is_published_after_it_started() -> None:
    app, broker = sub_app()
    seen: list[int] = []

    @broker.subscriber(RedisChannel("news"))
    async def handle(n: int) -> None:
        seen.append(n)

    async with app.test() as t:
        await t.publish(Destination.channel("news"), 1)
    async with app.test() as t:  # a fresh bus: nothing kept from before
        await t.publish(Destination.channel("news"), 2)
    assert seen == [1, 2]


def test_what_the_live_transport_refuses_is_refused_before_any_test_runs() -> None:
    _, broker = sub_app()
    with pytest.raises(UnsupportedError, match="pipeline=True"):

        @broker.subscriber(RedisChannel("news"), pipeline=True)
        async def windowed(n: int) -> None: ...

    assert broker.subscriptions == []  # the mount was refused, live or in-process


async def test_under_app_test_a_dead_letter_is_published_to_its_channel_or_kept_in_a_stream() -> (
    None
):
    app, broker = sub_app()
    letters: list[tuple[int, str]] = []
    kept: list[int] = []

    @broker.subscriber(RedisChannel("news"), name="sub", max_attempts=1, dead_letter="news.dead")
    async def handle(n: int) -> None:
        raise ValueError(f"cannot handle {n}")

    @broker.subscriber(
        RedisChannel("jobs", dead_letter_kind="stream"),
        name="kept",
        max_attempts=1,
        dead_letter="jobs.dead",
    )
    async def handle_job(n: int) -> None:
        raise ValueError(f"cannot handle {n}")

    @broker.subscriber(RedisChannel("news.dead"), name="letters")
    async def letter(n: int, headers: Headers) -> None:
        letters.append((n, headers["x-dead-letter-reason"]))

    @broker.subscriber(RedisStream("jobs.dead"), name="kept letters")
    async def kept_letter(n: int) -> None:
        kept.append(n)

    async with app.test() as t:
        await t.publish(Destination.channel("news"), 7)
        await t.publish(Destination.channel("jobs"), 8)
        [published] = t.published(Destination.channel("news.dead"))
    assert published.headers["x-dead-letter-stream"] == "news"
    assert letters == [(7, "max-attempts")]
    assert kept == [8]
