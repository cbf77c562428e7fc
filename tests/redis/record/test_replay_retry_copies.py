"""A recording made while an app retried holds the framework's retry copies: ``replay`` leaves
them out by default (saying how many), ``--keep-retries`` sends them; a ``--key`` the recording
does not hold is an error listing the keys it does."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
import trio

from tests.cli.support import cli, stderr_lines
from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Destination, Position
from trio_streams.core.delivery import RETRY_COUNT_HEADER
from trio_streams.file.writer import StreamWriter
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, shapes

from .support import recorded


def _app(url: str, stream: str, runs: Counter[int]) -> App:
    """A service whose handler fails on message 2 every time (3 attempts, then dropped)."""
    app = App("svc")
    broker = app.broker(RedisBroker(url, group="svc"))

    source = RedisStream(stream, start=Position.beginning())  # what is there already too

    @broker.subscriber(source, max_attempts=3, name="h", block=20)
    async def handle(n: int) -> None:
        runs[n] += 1
        if n == 2:
            raise ValueError("two fails")

    return app


async def _settled(redis: RedisClient, stream: str) -> bool:
    """Every entry of ``stream`` read and acknowledged by group ``svc``."""
    [info] = shapes.group_info(await redis.execute("XINFO", "GROUPS", stream))
    return bool(info["lag"] == 0 and info["pending"] == 0)


async def _run_until_settled(url: str, redis: RedisClient, stream: str, runs: Counter[int]) -> None:
    async with serving(_app(url, stream, runs)):

        async def settled() -> bool:
            return sum(runs.values()) >= 5 and await _settled(redis, stream)

        await eventually(settled, within=20, what=f"every entry of {stream!r} settled")


async def _recording_with_retries(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> Path:
    runs: Counter[int] = Counter()
    publisher = App("feed")
    feed = publisher.broker(RedisBroker(redis_server.url))
    async with serving(publisher):
        for n in (1, 2, 3):
            await feed.publish(Destination.stream("orders"), n)
    await _run_until_settled(redis_server.url, redis, "orders", runs)
    assert runs == Counter({1: 1, 2: 3, 3: 1})
    path = tmp_path / "rec.ss"
    result = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "orders", "--to", str(path))
    )
    assert result.returncode == 0, result.stderr
    # The three messages, and the copies of message 2 for its attempts 2 and 3.
    assert [m[4].get(RETRY_COUNT_HEADER) for m in recorded(path)] == [None, None, None, "1", "2"]
    return path


@pytest.mark.slow
async def test_replay_leaves_out_retry_copies_and_says_how_many_so_a_group_runs_each_as_it_did(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = await _recording_with_retries(redis_server, redis, tmp_path)
    result = await trio.to_thread.run_sync(
        lambda: cli("replay", str(path), "--to", redis_server.url, "--stream", "again")
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("replayed 3 messages of ")
    assert "; 2 retry copies left out (" in result.stdout
    assert await redis.execute("XLEN", "again") == 3
    runs: Counter[int] = Counter()
    await _run_until_settled(redis_server.url, redis, "again", runs)
    assert runs == Counter({1: 1, 2: 3, 3: 1})  # as in production: not 6 runs of message 2


@pytest.mark.slow
async def test_keep_retries_sends_the_retry_copies_as_recorded(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = await _recording_with_retries(redis_server, redis, tmp_path)
    result = await trio.to_thread.run_sync(
        lambda: cli(
            "replay", str(path), "--to", redis_server.url, "--stream", "again", "--keep-retries"
        )
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("replayed 5 messages of ")
    assert "left out" not in result.stdout
    entries = await redis.execute("XRANGE", "again", "-", "+")
    counts = [
        dict(zip(f[::2], f[1::2], strict=True)).get(b"h:" + RETRY_COUNT_HEADER.encode())
        for _, f in entries
    ]
    assert counts == [None, None, None, b"1", b"2"]


def _two_keys(path: Path) -> Path:
    with StreamWriter(path) as writer:
        for key in ("orders", "orders.dead", "audit"):
            writer.append(key, b'{"n": 1}')
    return path


async def test_replay_of_a_key_the_recording_does_not_hold_sends_nothing_and_lists_the_keys_there(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = _two_keys(tmp_path / "rec.ss")
    result = await trio.to_thread.run_sync(
        lambda: cli(
            "replay", str(path), "--to", redis_server.url, "--key", "orders", "--key", "ordres"
        )
    )
    assert result.returncode == 1
    assert stderr_lines(result) == [
        f"trio-streams replay: error: "
        f"no stream key 'ordres' in {path}; there: 'orders', 'orders.dead', 'audit'"
    ]
    assert await redis.execute("EXISTS", "orders") == 0  # nothing was sent


async def test_replay_of_a_recording_cut_short_sends_every_complete_message_then_fails_naming_it(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = tmp_path / "cut.ss"
    with StreamWriter(path) as writer:
        offsets = [writer.append("orders", str(n).encode())[2] for n in (1, 2, 3)]
    os.truncate(path, offsets[-1] + 5)
    result = await trio.to_thread.run_sync(
        lambda: cli("replay", str(path), "--to", redis_server.url)
    )
    assert result.returncode == 1
    [error, *_] = stderr_lines(result)
    assert error.startswith(f"trio-streams replay: error: {path} at byte {offsets[-1]}: ")
    assert "Traceback" not in result.stderr
    assert await redis.execute("XLEN", "orders") == 2


async def test_record_of_a_key_that_is_not_there_lists_the_streams_and_lists_there_closest_first(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("XADD", "orders", "*", "_payload", "1")
    await redis.execute("XADD", "audit", "*", "_payload", "1")
    await redis.execute("RPUSH", "orders.jobs", "x")
    path = tmp_path / "r.ss"
    result = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "ordres", "--to", str(path))
    )
    assert result.returncode == 1
    [error, *_] = stderr_lines(result)
    assert error.endswith(
        "(to record a Pub/Sub channel, add --channel); streams and lists there: 'orders', "
        "'orders.jobs', 'audit'"
    )
    assert not path.exists()
