"""``trio-streams replay`` logs in before it replays, and its summary names where it wrote."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.cli.support import cli
from tests.redis_servers import ADMIN_PASSWORD, RedisServer
from trio_streams.file.envelope import seal
from trio_streams.file.writer import StreamWriter
from trio_streams.redis.client import RedisClient


def _recording(path: Path) -> str:
    with StreamWriter(path) as writer:
        for n in range(3):
            writer.append("orders", seal(b"%d" % n, {"x-redis-id": f"{n + 1}-0"}), n + 1)
    return str(path)


async def _replay(*args: str) -> tuple[int, str, str]:
    result = await trio.to_thread.run_sync(lambda: cli("replay", *args))
    return result.returncode, result.stdout, result.stderr


async def test_a_wrong_password_is_one_login_error_not_a_refused_message(
    acl_redis_server: RedisServer, tmp_path: Path
) -> None:
    path = _recording(tmp_path / "shop.ss")
    server = acl_redis_server
    for url in (
        f"redis://:wrongpw@{server.host}:{server.port}",
        f"redis://{server.host}:{server.port}",  # no password at all
    ):
        status, out, err = await _replay(path, "--to", url)
        assert status == 1, err
        assert out == ""
        assert len(err.splitlines()) == 1, err
        assert "check the user name and password in the URL" in err
        assert "message #1" not in err and "Traceback" not in err
        assert "wrongpw" not in err


async def test_the_right_password_replays(acl_redis_server: RedisServer, tmp_path: Path) -> None:
    path = _recording(tmp_path / "shop.ss")
    url = f"redis://:{ADMIN_PASSWORD}@{acl_redis_server.host}:{acl_redis_server.port}"
    status, out, err = await _replay(path, "--to", url, "--stream", "login-ok")
    assert status == 0, err
    assert "replayed 3 messages" in out and "'login-ok': 3" in out


async def test_the_summary_names_the_key_a_refused_first_message_was_for(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("SET", "orders", "not a stream")
    path = _recording(tmp_path / "shop.ss")
    status, out, err = await _replay(path, "--to", redis_server.url)
    assert status == 1
    assert out.startswith(f"replayed 0 messages of {path} to stream 'orders': 0 ("), out
    assert "message #1 of 'orders'" in err and "WRONGTYPE" in err


async def test_the_summary_of_nothing_replayed_names_the_stream_given(
    redis_server: RedisServer, tmp_path: Path
) -> None:
    path = str(tmp_path / "empty.ss")
    StreamWriter(path).close()
    status, out, err = await _replay(path, "--to", redis_server.url, "--stream", "copy")
    assert status == 0, err
    assert out.startswith(f"replayed 0 messages of {path} to 'copy' ("), out


@pytest.mark.slow
async def test_a_login_error_names_the_command_it_stopped(
    acl_redis_server: RedisServer, tmp_path: Path
) -> None:
    url = f"redis://:wrongpw@{acl_redis_server.host}:{acl_redis_server.port}"
    path = _recording(tmp_path / "shop.ss")
    for command, argv in (
        ("top", ("top", url, "--once")),
        ("record", ("record", url, "orders", "--to", str(tmp_path / "r.ss"))),
        ("replay", ("replay", path, "--to", url)),
    ):
        result = await trio.to_thread.run_sync(cli, *argv)
        assert result.returncode == 1, result.stderr
        assert result.stderr.startswith(f"trio-streams {command}: error: WRONGPASS"), result.stderr
