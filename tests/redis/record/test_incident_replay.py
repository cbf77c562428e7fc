"""The recipe "reproduce a production incident locally": one handler, fed from Redis and from a
recording of the same stream, sees the same deliveries, and can seek the recording by time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio

from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.writer import StreamWriter
from trio_streams.record import ID_HEADER, record_stream
from trio_streams.redis import RedisBroker, RedisStream
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
