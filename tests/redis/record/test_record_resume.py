"""``trio-streams record`` into a file that already holds the key: nothing recorded twice."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.cli.support import cli
from tests.redis_servers import RedisServer
from trio_streams.file.envelope import seal
from trio_streams.file.writer import StreamWriter
from trio_streams.redis.client import RedisClient

from .support import add_entries, recorded


async def _record(url: str, path: Path, *more: str) -> tuple[int, str, str]:
    result = await trio.to_thread.run_sync(
        lambda: cli("record", url, "orders", "--to", str(path), "--progress", "none", *more)
    )
    return result.returncode, result.stdout, result.stderr


async def _recorded_once(url: str, redis: RedisClient, tmp_path: Path, entries: int) -> Path:
    """``entries`` entries added to ``orders`` and recorded into a new file: its path."""
    path = tmp_path / "rec.ss"
    await add_entries(redis, "orders", entries)
    assert (await _record(url, path))[0] == 0
    return path


def _ids(path: Path) -> list[str]:
    return [m[4]["x-redis-id"] for m in recorded(path)]


@pytest.mark.slow
async def test_recording_twice_resumes_after_the_last_recorded_id(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = await _recorded_once(redis_server.url, redis, tmp_path, 3)
    status, out, err = await _record(redis_server.url, path)
    assert status == 0, err
    assert "recorded 0 entries" in out and "resumed after 3000-0" in out
    await add_entries(redis, "orders", 2, first_ms=4000)
    status, out, err = await _record(redis_server.url, path)
    assert status == 0, err
    assert "recorded 2 entries" in out and "resumed after 3000-0" in out
    assert _ids(path) == ["1000-0", "2000-0", "3000-0", "4000-0", "5000-0"]
    assert [m[1] for m in recorded(path)] == [1, 2, 3, 4, 5]


async def _until_then_from(
    url: str, redis: RedisClient, path: Path, until: str, start: str
) -> tuple[str, list[str]]:
    """Record 4 entries ``--until`` one, then again ``--from`` another: the second summary and
    the ids in the file."""
    await add_entries(redis, "orders", 4)
    assert (await _record(url, path, "--until", until))[0] == 0
    status, out, err = await _record(url, path, "--from", start)
    assert status == 0, err
    return out, _ids(path)


@pytest.mark.slow
async def test_an_explicit_from_skips_the_ids_already_in_the_file(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    out, ids = await _until_then_from(
        redis_server.url, redis, tmp_path / "r.ss", "2000-0", "1000-0"
    )
    assert "recorded 2 entries" in out and "ids up to 2000-0, already in the file, skipped" in out
    assert ids == ["1000-0", "2000-0", "3000-0", "4000-0"]


@pytest.mark.slow
async def test_an_explicit_from_after_the_recorded_ids_says_nothing_was_skipped(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    out, ids = await _until_then_from(
        redis_server.url, redis, tmp_path / "r.ss", "1000-0", "3000-0"
    )
    assert "skipped" not in out and "resumed" not in out
    assert ids == ["1000-0", "3000-0", "4000-0"]


@pytest.mark.slow
async def test_recording_into_a_key_holding_messages_not_recorded_is_refused(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = tmp_path / "rec.ss"
    with StreamWriter(path) as writer:
        writer.append("orders", seal(b"app's own", {}), 500)
    await add_entries(redis, "orders", 2)
    status, out, err = await _record(redis_server.url, path)
    assert status == 1 and out == ""
    assert err.splitlines()[0].endswith(
        f"key 'orders' of {path} holds 1 message(s) that were not recorded from Redis "
        "(no x-redis-id header)"
    )
    assert "Traceback" not in err and "--append" in err
    assert len(recorded(path)) == 1  # nothing written
    status, out, err = await _record(redis_server.url, path, "--append")
    assert status == 0, err
    assert "recorded 2 entries" in out
    messages = recorded(path)
    assert messages[0][3] == b"app's own" and len(messages) == 3


@pytest.mark.slow
async def test_another_key_of_the_same_file_is_recorded_whole(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = await _recorded_once(redis_server.url, redis, tmp_path, 2)
    status, out, err = await _record(redis_server.url, path, "--key", "copy")
    assert status == 0, err
    assert "recorded 2 entries" in out and "resumed" not in out
