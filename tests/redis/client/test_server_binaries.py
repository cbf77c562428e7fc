"""Which server binary the test servers run (``TRIO_STREAMS_REDIS_SERVER``), and what a binary
says it is and can do. Every binary here is a real server: the chosen one, or Debian's linked
under another name."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tests.redis_servers import (
    RedisServer,
    ServerLaunchError,
    TlsFiles,
    redis_binary,
    server_build,
)
from trio_streams.testing.binaries import REPLICA_SYNCED, SERVER_ENV, SERVERS_DIR_ENV


def _debian(name: str) -> str:
    path = shutil.which(name)
    assert path is not None, f"{name} is not on PATH (Debian's redis-server package)"
    return path


def test_a_path_in_the_variable_is_the_binary_the_servers_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    chosen = redis_binary()
    monkeypatch.setenv(SERVER_ENV, chosen)
    assert redis_binary() == chosen
    with RedisServer() as server:
        assert server.argv()[0] == chosen
        assert server.command("PING") == b"PONG"


def test_a_name_is_a_directory_under_the_servers_directory(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "valkey-server").symlink_to(_debian("redis-server"))
    (tmp_path / "mine" / "valkey-benchmark").symlink_to(_debian("redis-benchmark"))
    monkeypatch.setenv(SERVERS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(SERVER_ENV, "mine")
    # Not resolved: a Valkey binary decides what to be from the name it is started by.
    assert redis_binary() == str(tmp_path / "mine" / "valkey-server")
    assert redis_binary("redis-benchmark") == str(tmp_path / "mine" / "valkey-benchmark")
    assert server_build().product == "Redis"  # what the binary says, not what it is called


def test_a_tool_missing_beside_the_server_is_taken_from_path(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "redis-server").symlink_to(_debian("redis-server"))
    monkeypatch.setenv(SERVER_ENV, str(tmp_path / "redis-server"))
    assert redis_binary("redis-cli") == _debian("redis-cli")


def test_an_unknown_name_fails_naming_where_it_looked(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(SERVERS_DIR_ENV, str(tmp_path))
    monkeypatch.setenv(SERVER_ENV, "redis-99.9")
    with pytest.raises(ServerLaunchError, match=re.escape(str(tmp_path / "redis-99.9"))):
        redis_binary()


def test_a_path_that_is_no_executable_fails_naming_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "redis-server").write_text("not a server")
    monkeypatch.setenv(SERVER_ENV, str(tmp_path / "redis-server"))
    with pytest.raises(ServerLaunchError, match="no executable file"):
        redis_binary()


def test_the_build_says_its_product_and_version() -> None:
    build = server_build()
    assert build.product in ("Redis", "Valkey")
    assert build.version >= (7, 0, 0)
    assert build.label.startswith(redis_binary())


def test_what_the_build_says_of_tls_is_what_a_tls_server_of_it_does(tmp_path: Path) -> None:
    build = server_build()
    server = RedisServer(tmp_path, tls=TlsFiles.generate(tmp_path))
    if build.tls:
        with server:
            assert server.command("PING") == b"PONG"
        assert build.without_tls() is None
    else:
        with pytest.raises(ServerLaunchError, match="TLS support"), server:
            pass
        assert build.without_tls() == f"{build.label} is built without TLS"


@pytest.mark.parametrize(
    "line",
    [
        "1:S 07 Dec 2026 14:14:21.319 * MASTER <-> REPLICA sync: Finished with success",
        "1:S 07 Dec 2026 14:14:21.319 * PRIMARY <-> REPLICA sync: Finished with success",
    ],
    ids=["redis", "valkey"],
)
def test_a_replica_synced_in_either_servers_words(line: str) -> None:
    assert re.search(REPLICA_SYNCED, line)
