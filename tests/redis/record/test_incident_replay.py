"""The recipe "reproduce a production incident locally": one handler, fed from Redis and from a
recording of the same stream, sees the same deliveries, and can seek the recording by time."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import trio

from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.writer import StreamWriter
from trio_streams.record import ID_HEADER, record_stream
from trio_streams.redis import RedisBroker, RedisStream, entry_fields
from trio_streams.redis.client import RedisClient

from .support import add_entries

Seen = list[tuple[dict[str, Any], dict[str, str], int | None, str]]


def handler_for(seen: Seen, want: int, done: trio.Event) -> Any:
    """The handler under test: it keeps what it was given, and where it came from."""

    async def handle(order: dict[str, Any], ctx: Context) -> None:
        headers = dict(ctx.headers)
        # From Redis the entry id is the position; from a recording, the header that kept it.
        recorded_id = headers.pop(ID_HEADER, None)
        assert ctx.position is not None
        entry_id = recorded_id if recorded_id is not None else ctx.position.entry_id
        seen.append((order, headers, ctx.timestamp_ms, entry_id))
        if len(seen) == want:
            done.set()

    return handle


async def test_a_handler_fed_from_a_recording_and_from_redis_gets_identical_deliveries(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 50)
    with StreamWriter(tmp_path / "incident.ss") as writer:
        await record_stream(redis, "orders", writer)

    from_redis: Seen = []
    live = App("live")
    redis_broker = live.broker(RedisBroker(redis_server.url, group="billing"))
    done = trio.Event()
    redis_broker.subscriber(RedisStream("orders", start=Position.beginning()))(
        handler_for(from_redis, 50, done)
    )
    async with serving(live):
        with trio.fail_after(20):
            await done.wait()

    from_file: Seen = []
    local = App("local")
    file_broker = local.broker(FileBroker(tmp_path / "incident.ss"))
    done = trio.Event()
    file_broker.subscriber(FileStream("orders").replay())(handler_for(from_file, 50, done))
    async with serving(local):
        with trio.fail_after(20):
            await done.wait()

    assert from_file == from_redis
    assert from_redis[7] == ({"n": 7}, {"trace": "t7", "tenant": "eu"}, 8000, "8000-0")


async def test_a_recording_can_be_seeked_by_time_as_recorded(
    redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 10)  # at 1000, 2000, ... 10000 ms
    with StreamWriter(tmp_path / "incident.ss") as writer:
        await record_stream(redis, "orders", writer)
    app = App("local")
    broker = app.broker(FileBroker(tmp_path / "incident.ss"))
    seen: list[int | None] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders").replay())
    async def handle(order: dict[str, Any], ctx: Context) -> None:
        seen.append(ctx.timestamp_ms)
        if len(seen) == 1:  # the incident began after 6 s: go there
            await ctx.seeker.seek(Position.timestamp(6000))
        elif ctx.timestamp_ms == 10_000:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()
    assert seen == [1000, 7000, 8000, 9000, 10_000]


OTHER_PRODUCERS = [
    ("kind", "click", "at", "home"),
    ("data", b"\x82\xa1a\x01\xff"),
    ("f", "1", "f", "2"),
    ("_payload", b'{"n":1}', "h:a", "1", "correlation_id", "c1"),
    ("_payload", b'{"n":2}', "h:bin", b"\xff\xfe", "h:ok", "yes"),
]


async def test_a_handler_fed_from_a_recording_sees_entries_of_other_producers_as_from_redis(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    for n, fields in enumerate(OTHER_PRODUCERS):
        await redis.execute("XADD", "events", f"{1000 + n}-0", *fields)
    with StreamWriter(tmp_path / "incident.ss") as writer:
        await record_stream(redis, "events", writer)
    want = len(OTHER_PRODUCERS)

    async def deliveries(
        app: App, subscribe: Callable[[Any], Any]
    ) -> list[tuple[bytes, dict[str, str], Any]]:
        seen: list[tuple[bytes, dict[str, str], Any]] = []
        done = trio.Event()

        @subscribe
        async def handle(body: bytes, ctx: Context) -> None:
            headers = dict(ctx.headers)
            headers.pop(ID_HEADER, None)
            seen.append((body, headers, ctx.timestamp_ms))
            if len(seen) == want:
                done.set()

        async with serving(app):
            with trio.fail_after(20):
                await done.wait()
        return seen

    live = App("live")
    from_redis = await deliveries(
        live,
        live.broker(RedisBroker(redis_server.url, group="billing")).subscriber(
            RedisStream("events", start=Position.beginning())
        ),
    )
    local = App("local")
    from_file = await deliveries(
        local,
        local.broker(FileBroker(tmp_path / "incident.ss")).subscriber(
            FileStream("events").replay()
        ),
    )
    assert from_file == from_redis
    assert all("x-redis-fields" not in headers for _, headers, _ in from_file)
    # A header that is not UTF-8: not trio-streams' layout, so delivered whole, as its fields
    # (nothing replaced by U+FFFD), and the same from the file.
    body, headers, _ = from_redis[4]
    assert headers == {}
    assert entry_fields(body) == [b"_payload", b'{"n":2}', b"h:bin", b"\xff\xfe", b"h:ok", b"yes"]
    assert entry_fields(from_redis[1][0]) == [b"data", b"\x82\xa1a\x01\xff"]
