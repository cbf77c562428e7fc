"""``trio-streams publish`` to Redis refuses what cannot be published, in one line naming the
command, the target and the cause (status 1 for what the server says, 2 for a bad command
line), before anything is published where it can know; what went out before an error is said."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from tests.redis_servers import (
    ACL_PASSWORD,
    ACL_RULES,
    ACL_USER,
    ADMIN_PASSWORD,
    RedisServer,
    free_port,
    redis_server,
)

from .publish_redis_support import publish, server
from .support import COMMAND, ROOT, run_command

__all__ = ["server"]  # the fixture, imported for the tests here

PREFIX = "trio-streams publish: error: "


@pytest.fixture(scope="module")
def acl_server() -> Iterator[RedisServer]:
    """The default user needs :data:`ADMIN_PASSWORD`; :data:`ACL_USER` may touch ``app:*``."""
    with redis_server("--requirepass", ADMIN_PASSWORD, "--user", *ACL_RULES) as started:
        yield started


def test_a_server_that_is_down_is_one_line_naming_the_target_and_the_cause() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"
    result = publish(url, "orders", "x")
    assert result.status == 1
    [line] = result.err_lines
    assert line.startswith(f"{PREFIX}cannot publish to {url}: "), line
    assert "cannot connect" in line
    assert result.out == ""


def test_a_list_key_published_as_a_stream_is_refused_before_anything_is_published(
    server: RedisServer,
) -> None:
    server.command("RPUSH", "jobs", "queued")
    lines = b'{"payload": "1", "stream_key": "orders"}\n{"payload": "2", "stream_key": "jobs"}\n'
    result = publish(server.url, "--ndjson", stdin=lines)
    assert result.status == 1
    assert result.err_lines[0] == (
        f"{PREFIX}cannot publish to {server.url}: key 'jobs' holds a list, not a stream; "
        "--list pushes to a list"
    )
    assert result.err_lines[1:] == ["  use another key, or delete this one"]
    assert server.command("EXISTS", "orders") == 0  # the first line's key was not written
    assert server.command("LRANGE", "jobs", 0, -1) == [b"queued"]


def test_a_stream_key_pushed_to_as_a_list_is_refused_naming_the_key(server: RedisServer) -> None:
    server.command("XADD", "orders", "*", "_payload", "1")
    result = publish(server.url, "orders", "x", "--list")
    assert result.status == 1
    assert result.err_lines[0].endswith(
        "key 'orders' holds a stream, not a list; without --list, publish adds an entry to a stream"
    )
    assert server.command("XLEN", "orders") == 1


@pytest.mark.parametrize("user", ["", "app"])
def test_a_wrong_password_is_one_login_error_with_the_password_masked(
    acl_server: RedisServer, user: str
) -> None:
    url = f"redis://{user}:wrongpw@{acl_server.host}:{acl_server.port}/0"
    result = publish(url, "app:orders", "x")
    assert result.status == 1
    [line] = result.err_lines  # the login's error only: nothing about the command table
    shown = f"redis://{user}:***@{acl_server.host}:{acl_server.port}/0"
    assert line.startswith(f"{PREFIX}cannot publish to {shown}: WRONGPASS"), line
    assert "check the user name and password in the URL" in line
    assert "wrongpw" not in result.err


def test_an_error_after_some_messages_says_how_many_went_out_and_prints_their_receipts(
    acl_server: RedisServer,
) -> None:
    # The ACL user may write app:* only: the second key is refused by the server (NOPERM).
    url = f"redis://{ACL_USER}:{ACL_PASSWORD}@{acl_server.host}:{acl_server.port}"
    lines = "".join(
        json.dumps({"stream_key": key, "payload": "x"}) + "\n"
        for key in ("app:orders", "elsewhere", "app:orders")
    )
    result = publish(url, "--ndjson", stdin=lines.encode())
    assert result.status == 1
    [receipt] = result.receipts
    assert receipt.startswith("app:orders id:")
    assert result.err_lines[0].startswith(f"{PREFIX}cannot publish to redis://app:***@"), result.err
    assert "NOPERM" in result.err_lines[0]
    assert result.err_lines[-1] == (
        "  1 of the 3 messages was published before it (their receipts are on stdout); the "
        "others were not"
    )


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("redis://h:port/0", "bad port 'port'"),
        ("redis://127.0.0.1:1/x", "database"),
        ("rediss+sentinel://127.0.0.1:1", "service"),
        ("redis://a:1,b:2/0", "names 2 hosts"),
        ("kafka://127.0.0.1:1", "kafka:// is not supported"),
    ],
)
def test_a_bad_url_is_a_bad_command_line(url: str, says: str) -> None:
    result = publish(url, "orders", "x")
    assert result.status == 2
    [line] = result.err_lines
    assert line.startswith(f"{PREFIX}argument TARGET: "), line
    assert says in line


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["--list", "--channel"], "argument --channel: not allowed with argument --list"),
        (["--sharded"], "--sharded goes with --channel"),
        (["--list", "--sharded"], "--sharded goes with --channel"),
        (["--beacon-interval", "4096"], "--beacon-interval is for a stream file target"),
    ],
)
def test_options_that_do_not_go_together_or_mean_nothing_for_redis_are_refused(
    server: RedisServer, argv: list[str], says: str
) -> None:
    result = publish(server.url, "orders", "x", *argv)
    assert result.status == 2
    [line] = result.err_lines
    assert line.startswith(PREFIX) and says in line, line
    assert server.command("DBSIZE") == 0


@pytest.mark.parametrize("option", ["--list", "--channel"])
def test_redis_options_are_refused_for_a_stream_file(tmp_path: object, option: str) -> None:
    path = f"{tmp_path}/orders.ss"
    result = publish(path, "orders", "x", option)
    assert result.status == 2
    assert result.err_lines == [
        f"{PREFIX}{option} is for a Redis target (redis://...); {path} is a stream file, which "
        "holds streams only"
    ]


def test_an_empty_key_is_a_bad_command_line_and_an_empty_ndjson_key_a_bad_line(
    server: RedisServer,
) -> None:
    result = publish(server.url, "", "x")
    assert result.status == 2
    assert result.err_lines[0].startswith(f"{PREFIX}argument KEY: ")
    lines = b'{"payload": "1"}\n{"payload": "2", "stream_key": ""}\n'
    bad = publish(server.url, "orders", "--ndjson", stdin=lines)
    assert bad.status == 1
    assert bad.err_lines[0].startswith(f"{PREFIX}line 2: bad message: ")
    assert bad.err_lines[0].endswith("; nothing was published")
    assert server.command("DBSIZE") == 0


def test_a_header_that_is_not_utf8_text_is_refused_before_anything_is_published(
    server: RedisServer,
) -> None:
    lines = b'{"payload": "1"}\n{"payload": "2", "headers": {"h": "\\ud800"}}\n'
    result = publish(server.url, "orders", "--ndjson", stdin=lines)
    assert result.status == 1
    assert result.err_lines == [
        f"{PREFIX}line 2: bad message: headers: the value of header 'h' is not UTF-8 text "
        "(surrogates not allowed); nothing was published"
    ]
    assert server.command("DBSIZE") == 0


def test_without_hiredis_a_redis_target_is_refused_naming_the_redis_extra() -> None:
    # An interpreter where hiredis cannot be imported, as on an install without the extra.
    program = (
        "import sys; sys.modules['hiredis'] = None; "
        "from trio_streams.cli.commands import main; sys.exit(main(sys.argv[1:]))"
    )
    result = run_command(
        [sys.executable, "-c", program, "publish", "redis://127.0.0.1:9/0", "orders", "x"]
    )
    assert result.returncode == 2, result.stderr
    [line] = result.stderr.splitlines()
    assert line.startswith("trio-streams publish: a Redis target needs the 'redis' extra"), line
    assert "pip install" in line


def test_ctrl_c_while_a_server_does_not_answer_exits_130_without_a_traceback() -> None:
    with socket.socket() as silent:  # accepts the connection, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        silent.settimeout(30)
        url = f"redis://127.0.0.1:{silent.getsockname()[1]}/0"
        with subprocess.Popen(
            [*COMMAND, "publish", url, "orders", "x"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        ) as process:  # fmt: skip
            connection, _ = silent.accept()  # the command is waiting for the server's answer
            with connection:
                process.send_signal(signal.SIGINT)
                out, err = process.communicate(timeout=30)
    assert process.returncode == 130, err
    assert out == ""
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
