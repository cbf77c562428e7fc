"""Wherever a command shows a Redis URL, its password is ``***``: ``top``'s title (``--once``
and the live view), ``record``'s errors, and nothing of it reaches a recording. The server
requires the password (``--requirepass``), so the commands really use it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.cli.support import cli
from tests.redis.top.terminal import screen_shows, session, start_top
from tests.redis_servers import ADMIN_PASSWORD, RedisServer
from tests.redis_servers import redis_server as start_redis_server
from trio_streams.redis.client import connect

__all__ = ["session"]  # the fixture


@pytest.fixture(scope="module")
def locked_server() -> Iterator[RedisServer]:
    """A server whose default user needs :data:`ADMIN_PASSWORD`."""
    with start_redis_server("--requirepass", ADMIN_PASSWORD) as server:
        yield server


def secret_url(server: RedisServer, user: str = "") -> str:
    return f"redis://{user}:{ADMIN_PASSWORD}@{server.host}:{server.port}"


def masked_url(server: RedisServer, user: str = "") -> str:
    return f"redis://{user}:***@{server.host}:{server.port}"


async def test_top_once_shows_the_url_with_its_password_masked(
    locked_server: RedisServer,
) -> None:
    async with connect(secret_url(locked_server)) as client:
        await client.execute("XADD", "orders", "*", "_payload", "1")
    result = cli("top", secret_url(locked_server), "--once", "--interval", "0.01")
    assert result.returncode == 0, result.stderr
    assert ADMIN_PASSWORD not in result.stdout + result.stderr
    assert result.stdout.splitlines()[0].startswith(f"{masked_url(locked_server)}: "), result.stdout


def test_top_keeps_the_user_and_masks_only_the_password(locked_server: RedisServer) -> None:
    result = cli("top", secret_url(locked_server, "default"), "--once", "--interval", "0.01")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(masked_url(locked_server, "default")), result.stdout
    assert ADMIN_PASSWORD not in result.stdout + result.stderr


def test_top_refusing_a_missing_stream_masks_the_password(locked_server: RedisServer) -> None:
    result = cli("top", secret_url(locked_server), "--once", "--stream", "no-such-stream")
    assert result.returncode == 1
    assert ADMIN_PASSWORD not in result.stdout + result.stderr
    assert masked_url(locked_server) in result.stderr, result.stderr


@pytest.mark.slow
def test_record_of_a_key_that_is_nothing_names_the_url_with_its_password_masked(
    locked_server: RedisServer, tmp_path: Path
) -> None:
    result = cli("record", secret_url(locked_server), "no-such-key", "--to", str(tmp_path / "x.ss"))
    assert result.returncode == 1
    assert ADMIN_PASSWORD not in result.stdout + result.stderr
    assert f"'no-such-key' at {masked_url(locked_server)} is nothing" in result.stderr


@pytest.mark.slow
async def test_a_recording_and_its_summary_hold_nothing_of_the_password(
    locked_server: RedisServer, tmp_path: Path
) -> None:
    async with connect(secret_url(locked_server)) as client:
        await client.execute("XADD", "kept", "*", "_payload", "1")
    copy = tmp_path / "kept.ss"
    result = cli("record", secret_url(locked_server), "kept", "--to", str(copy))
    assert result.returncode == 0, result.stderr
    assert ADMIN_PASSWORD not in result.stdout + result.stderr
    assert ADMIN_PASSWORD.encode() not in copy.read_bytes()
    replayed = cli("replay", str(copy), "--to", secret_url(locked_server), "--stream", "again")
    assert replayed.returncode == 0, replayed.stderr
    assert ADMIN_PASSWORD not in replayed.stdout + replayed.stderr


def test_a_url_of_another_scheme_given_to_top_masks_its_password() -> None:
    result = cli("top", f"https://me:{ADMIN_PASSWORD}@127.0.0.1:9", "--once")
    assert result.returncode == 2
    assert ADMIN_PASSWORD not in result.stderr and "me:***@" in result.stderr


async def test_the_live_view_of_top_shows_the_url_with_its_password_masked(
    locked_server: RedisServer, session: str
) -> None:
    async with connect(secret_url(locked_server)) as client:
        await client.execute("XADD", "orders", "*", "_payload", "1")
    await start_top(session, secret_url(locked_server), "--interval", "0.2", columns=80, rows=30)
    screen = await screen_shows(session, f"{masked_url(locked_server)}: ")
    assert ADMIN_PASSWORD not in screen, screen
