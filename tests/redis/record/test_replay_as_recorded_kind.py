"""Without ``--as``, ``trio-streams replay`` sends each message back as what it was recorded
from: a channel's message as a channel message, a list's element as a list element, a stream's
entry as a stream entry; ``--as`` still sends every message as one kind."""

from __future__ import annotations

from pathlib import Path

import trio

from tests.cli.support import cli
from tests.redis_servers import RedisServer
from trio_streams.file.envelope import seal
from trio_streams.file.writer import StreamWriter
from trio_streams.record import CHANNEL_HEADER, LIST_HEADER
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import decode_frame, encode_frame

from .test_pattern_replay import listening


def _mixed_recording(path: Path) -> str:
    """A channel's messages, a list's elements and a stream's entries, interleaved."""
    with StreamWriter(path) as writer:
        writer.append("news", seal(b"n1", {CHANNEL_HEADER: "news"}), 1)
        writer.append("jobs", seal(b"j1", {LIST_HEADER: "jobs", "try": "1"}), 2)
        writer.append("orders", seal(b"o1", {"x-redis-id": "3-0"}), 3)
        writer.append("news", seal(b"n2", {CHANNEL_HEADER: "news"}), 4)
        writer.append("jobs", seal(b"j2", {LIST_HEADER: "jobs"}), 5)
    return str(path)


async def _replay(*args: str) -> tuple[int, str, str]:
    result = await trio.to_thread.run_sync(lambda: cli("replay", *args))
    return result.returncode, result.stdout, result.stderr


async def test_the_default_as_follows_what_each_message_was_recorded_from(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = _mixed_recording(tmp_path / "mixed.ss")
    async with listening(redis) as heard:
        status, out, err = await _replay(path, "--to", redis_server.url)
        assert status == 0, err
        assert await heard() == [("news", b"n1"), ("news", b"n2")]
    assert await redis.execute("TYPE", "news") == b"none"  # no stream made of a channel
    jobs = await redis.execute("LRANGE", "jobs", 0, -1)
    assert [decode_frame(v) for v in jobs] == [(b"j1", {"try": "1"}), (b"j2", {})]
    entries = await redis.execute("XRANGE", "orders", "-", "+")
    assert [dict(zip(f[::2], f[1::2], strict=True)) for _, f in entries] == [{b"_payload": b"o1"}]
    assert "to stream 'orders': 1, list 'jobs': 2, channel 'news': 2 (" in out, out


async def test_an_explicit_as_still_sends_every_message_as_that_kind(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = _mixed_recording(tmp_path / "mixed.ss")
    status, out, err = await _replay(path, "--to", redis_server.url, "--as", "stream")
    assert status == 0, err
    assert int(await redis.execute("XLEN", "news")) == 2
    assert int(await redis.execute("XLEN", "jobs")) == 2
    assert "to stream 'jobs': 2, 'news': 2, 'orders': 1 (" in out, out


async def test_a_recorded_list_is_pushed_back_to_a_list_by_default(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("RPUSH", "todo", encode_frame(b"a", {"k": "v"}), b"plain")
    path = str(tmp_path / "todo.ss")
    record = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "todo", "--to", path, "--progress", "none")
    )
    assert record.returncode == 0, record.stderr
    status, out, err = await _replay(path, "--to", redis_server.url, "--stream", "todo2")
    assert status == 0, err
    copied = await redis.execute("LRANGE", "todo2", 0, -1)
    assert [decode_frame(v) for v in copied] == [(b"a", {"k": "v"}), (b"plain", {})]
    assert "to list 'todo2': 2 (" in out
