"""The shipped server helper: ``with RedisServer() as server`` is a real, disposable server."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_streams.redis.client import RedisConnectionError, connect
from trio_streams.testing.servers import RedisServer, ServerLaunchError


def test_a_server_used_as_a_context_runs_inside_and_leaves_nothing_behind() -> None:
    with RedisServer() as server:
        assert server.running
        assert server.url == f"redis://127.0.0.1:{server.port}"
        assert server.command("SET", "k", "v") == b"OK"
        assert server.command("CONFIG", "GET", "save") == [b"save", b""]
        directory = server.directory
        assert directory.is_dir()
    assert server.process is not None and server.process.poll() is not None  # killed
    assert not directory.exists()


def test_a_server_given_a_directory_keeps_it(tmp_path: Path) -> None:
    with RedisServer(tmp_path) as server:
        assert server.directory == tmp_path
    assert tmp_path.is_dir()


async def test_a_killed_server_comes_back_on_the_same_port_empty() -> None:
    with RedisServer() as server:
        port = server.port
        async with connect(server.url) as redis:
            await redis.execute("SET", "k", "v")
            server.kill()
            with pytest.raises(RedisConnectionError):
                await redis.execute("GET", "k")
            server.restart()
            assert server.port == port
            assert await redis.execute("GET", "k") is None  # no persistence


def test_a_server_that_cannot_start_says_why_and_cleans_up() -> None:
    server = RedisServer(extra_args=["--no-such-directive", "1"])
    with pytest.raises(ServerLaunchError, match="exited before logging"), server:
        pass
    assert not server.directory.exists()
