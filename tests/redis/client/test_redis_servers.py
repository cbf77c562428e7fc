"""The test server launcher itself: clear failures, never a skip."""

from __future__ import annotations

import pytest

from tests.redis_servers import (
    RedisServer,
    ServerLaunchError,
    redis_binary,
    redis_server,
    redis_version,
)


def test_missing_binary_fails_with_instructions(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("TRIO_STREAMS_REDIS_SERVER", raising=False)
    with pytest.raises(ServerLaunchError, match=r"apt-get install redis-server.*never skip"):
        redis_binary()


def test_installed_server_is_recent_enough_for_this_client() -> None:
    assert redis_version() >= (7, 0, 0)  # CLUSTER SHARDS, SSUBSCRIBE, ACL selectors


def test_bad_configuration_fails_with_the_servers_own_words() -> None:
    with redis_server() as healthy:
        server = RedisServer(healthy.directory, extra_args=["--no-such-directive", "1"])
        with pytest.raises(ServerLaunchError, match="exited before logging") as caught:
            server.start()
        assert "no-such-directive" in str(caught.value)


def test_waiting_for_a_log_line_is_bounded(redis_server: RedisServer) -> None:
    with pytest.raises(ServerLaunchError, match=r"did not log /never said/ within 0\.05s"):
        redis_server.wait_for_log("never said", timeout=0.05)


def test_kill_and_restart_on_the_same_port(redis_server: RedisServer) -> None:
    port = redis_server.port
    redis_server.command("SET", "k", "v")
    redis_server.kill()
    assert not redis_server.running
    redis_server.start()
    assert redis_server.port == port
    assert redis_server.command("GET", "k") is None  # nothing persisted
