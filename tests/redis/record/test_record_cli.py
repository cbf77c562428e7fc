"""``trio-streams record`` / ``replay`` in a real subprocess: signals, progress, errors."""

from __future__ import annotations

import signal
from pathlib import Path

import trio

from tests.cli.support import COMMAND, cli
from tests.redis.client.redis_waits import eventually, wait_until_blocked
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient

from .support import add_entries, command_in_background, exit_status, recorded


async def test_sigterm_while_following_flushes_and_closes_the_file_and_prints_a_summary(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 3)
    path = tmp_path / "r.ss"
    argv = [*COMMAND, "record", redis_server.url, "orders", "--follow", "--to", str(path)]
    async with command_in_background(argv, tmp_path) as process:
        await wait_until_blocked(redis, "xread")
        await redis.execute("XADD", "orders", "99000-0", "_payload", b"late")

        async def in_file() -> bool:
            return len(recorded(path)) == 4

        await eventually(in_file, within=20, what="the new entry in the recording")
        status = await exit_status(process, signal.SIGTERM)
    out, err = (tmp_path / "out").read_text(), (tmp_path / "err").read_text()
    assert status == 0, err
    assert "recorded 4 entries of stream 'orders'" in out
    assert "ids 1000-0..99000-0" in out and "stopped by SIGTERM" in out
    assert "following stream 'orders'" in err  # plain progress lines: stderr is not a terminal
    assert [m[3] for m in recorded(path)][-1] == b"late"
    # Closed cleanly: another writer can take the file at once.
    from trio_streams.file.writer import StreamWriter

    StreamWriter(path).close()


async def test_record_then_replay_from_the_command_line(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 5)
    path = str(tmp_path / "r.ss")
    result = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "orders", "--to", path, "--progress", "plain")
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("recorded 5 entries of stream 'orders' into ")
    assert "recording stream 'orders': " in result.stderr
    result = await trio.to_thread.run_sync(
        lambda: cli("replay", path, "--to", redis_server.url, "--stream", "copy", "--rate", "1000")
    )
    assert result.returncode == 0, result.stderr
    assert "replayed 5 messages" in result.stdout and "'copy': 5" in result.stdout
    assert await redis.execute("XLEN", "copy") == 5


async def test_recording_a_key_that_is_neither_stream_nor_list_says_what_it_is(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("SET", "flag", "1")
    path = str(tmp_path / "r.ss")
    missing = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "nothing", "--to", path)
    )
    string = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "flag", "--to", path)
    )
    assert missing.returncode == 1 and "is nothing, not a stream or a list" in missing.stderr
    assert "add --channel" in missing.stderr
    assert string.returncode == 1 and "is a string, not a stream or a list" in string.stderr
    assert not (tmp_path / "r.ss").exists()


async def test_a_list_cannot_be_followed(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("RPUSH", "jobs", b"x")
    result = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "jobs", "--follow", "--to", str(tmp_path / "r"))
    )
    assert result.returncode == 1 and "following a list would take its elements" in result.stderr


def test_bad_bounds_and_rates_are_refused_by_the_parser() -> None:
    assert cli("replay", "x.ss", "--to", "redis://h", "--rate", "0").returncode == 2
    assert cli("record", "redis://h", "s", "--to", "x", "--until", "1", "--follow").returncode == 2


async def test_an_error_while_recording_is_one_line_with_a_hint_and_the_file_keeps_what_came_before(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await add_entries(redis, "orders", 2)
    await redis.execute("XADD", "orders", "9000-0", "_payload", b"x", "h:x-redis-id", "1-0")
    path = tmp_path / "r.ss"
    result = await trio.to_thread.run_sync(
        lambda: cli("record", redis_server.url, "orders", "--to", str(path))
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[-2:] == [
        "trio-streams record: error: "
        "entry 9000-0 already carries the header 'x-redis-id' (= '1-0'); recording it "
        "would replace that with '9000-0'",
        "  name the header that keeps entry ids otherwise with --id-header NAME",
    ]
    assert "Traceback" not in result.stderr
    assert [m[2] for m in recorded(path)] == [1000, 2000]


async def test_ctrl_c_stops_a_channel_recording_cleanly(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path, err_path = tmp_path / "r.ss", tmp_path / "err"
    argv = [*COMMAND, "record", redis_server.url, "news", "--channel", "--to", str(path)]
    async with command_in_background(argv, tmp_path) as process:

        async def subscribed() -> bool:
            await trio.lowlevel.checkpoint()
            return "following channel 'news'" in err_path.read_text()

        await eventually(subscribed, within=20, what="the recording to subscribe")
        await redis.execute("PUBLISH", "news", b"one")
        await redis.execute("PUBLISH", "news", b"two")

        async def in_file() -> bool:
            await trio.lowlevel.checkpoint()
            return len(recorded(path)) == 2

        await eventually(in_file, within=20, what="both messages in the recording")
        status = await exit_status(process, signal.SIGINT)
    out = (tmp_path / "out").read_text()
    assert status == 0, err_path.read_text()
    assert "recorded 2 entries of channel 'news'" in out and "stopped by SIGINT" in out
    assert [m[3] for m in recorded(path)] == [b"one", b"two"]


async def test_follow_waits_for_a_stream_that_does_not_exist_yet(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = tmp_path / "r.ss"
    argv = [*COMMAND, "record", redis_server.url, "later", "--follow", "--limit", "1",
            "--to", str(path)]  # fmt: skip
    async with command_in_background(argv, tmp_path) as process:
        await wait_until_blocked(redis, "xread")
        await redis.execute("XADD", "later", "7-0", "_payload", b"first")
        status = await exit_status(process)
    assert status == 0, (tmp_path / "err").read_text()
    assert "--limit reached" in (tmp_path / "out").read_text()
    assert [m[3] for m in recorded(path)] == [b"first"]


def test_from_end_without_follow_is_refused_as_a_bad_command_line() -> None:
    result = cli("record", "redis://127.0.0.1:1", "s", "--from", "end", "--to", "x.ss")
    assert result.returncode == 2 and "add --follow" in result.stderr
