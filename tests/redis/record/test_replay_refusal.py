"""A replay stops at the first refused command: what went before stays, nothing after it is
published (not even what was in the same batch), and the command line still prints its summary.
A start that needs a stream key says to give one."""

from __future__ import annotations

import secrets
from pathlib import Path

import pytest
import trio

from tests.cli.support import cli
from tests.redis_servers import RedisClusterServers, RedisServer
from trio_streams import Position
from trio_streams.file.envelope import seal
from trio_streams.file.writer import StreamWriter
from trio_streams.record import replay_file
from trio_streams.record.replayer import ReplayError, ReplaySummary, StartNeedsKey
from trio_streams.record.sending import MAX_SCRIPT_ARGS
from trio_streams.redis.client import RedisClient, connect, key_slot

from .support import raw_entries


def _write(
    path: Path, messages: list[tuple[str, bytes]], headers: dict[str, str] | None = None
) -> None:
    with StreamWriter(path) as writer:
        for key, payload in messages:
            writer.append(key, seal(payload, headers or {}))


def _payloads(entries: list[tuple[str, list[bytes]]]) -> list[bytes]:
    return [fields[1] for _, fields in entries]


MESSAGES = [("ok", b"before"), ("bad", b"refused"), ("ok", b"after"), ("other", b"later")]


@pytest.mark.parametrize("batch", [1000, 2, 1])
async def test_nothing_after_the_first_refused_command_is_published(
    redis: RedisClient, tmp_path: Path, batch: int
) -> None:
    await redis.execute("SET", "bad", "a string")  # XADD to it is refused: WRONGTYPE
    _write(tmp_path / "r.ss", MESSAGES)
    summary = ReplaySummary()
    with pytest.raises(ReplayError, match=r"message #1 of 'bad'.*WRONGTYPE.*nothing after"):
        await replay_file(tmp_path / "r.ss", redis, batch=batch, summary=summary)
    assert _payloads(await raw_entries(redis, "ok")) == [b"before"]
    assert await redis.execute("EXISTS", "other") == 0
    assert summary.published == 1 and summary.per_key == {"ok": 1}


async def test_a_refused_first_command_publishes_nothing(
    redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("SET", "bad", "a string")
    _write(tmp_path / "r.ss", [("bad", b"x"), ("ok", b"y")])
    with pytest.raises(ReplayError, match="#1 of 'bad'"):
        await replay_file(tmp_path / "r.ss", redis)
    assert await redis.execute("EXISTS", "ok") == 0


async def test_a_command_too_long_for_one_script_call_goes_alone_and_is_stopped_at_too(
    redis: RedisClient, tmp_path: Path
) -> None:
    many = {f"h{n}": str(n) for n in range(MAX_SCRIPT_ARGS)}  # more fields than a script call
    with StreamWriter(tmp_path / "r.ss") as writer:
        writer.append("ok", seal(b"short", {}))
        writer.append("ok", seal(b"long", many))
        writer.append("bad", seal(b"long refused", many))
        writer.append("ok", seal(b"after", {}))
    await redis.execute("SET", "bad", "a string")
    with pytest.raises(ReplayError, match="#1 of 'bad'"):
        await replay_file(tmp_path / "r.ss", redis)
    copied = await raw_entries(redis, "ok")
    assert _payloads(copied) == [b"short", b"long"]
    assert len(copied[1][1]) == 2 + 2 * MAX_SCRIPT_ARGS


async def test_the_command_line_prints_the_summary_then_the_error_and_exits_1(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    await redis.execute("SET", "bad", "a string")
    _write(tmp_path / "r.ss", MESSAGES)
    path = str(tmp_path / "r.ss")
    result = await trio.to_thread.run_sync(lambda: cli("replay", path, "--to", redis_server.url))
    assert result.returncode == 1
    assert result.stdout.startswith("replayed 1 messages of ")
    assert "'ok': 1" in result.stdout and "stopped by a refused message" in result.stdout
    assert result.stderr.startswith("trio-streams replay: error: message #1 of 'bad'")
    assert _payloads(await raw_entries(redis, "ok")) == [b"before"]


async def test_on_a_cluster_nothing_after_the_refused_command_is_published(
    redis_cluster: RedisClusterServers, tmp_path: Path
) -> None:
    prefix = f"ref{secrets.token_hex(4)}"
    ok, bad, other = f"{prefix}.a", f"{prefix}.b", f"{prefix}.c"
    assert len({key_slot(ok), key_slot(bad), key_slot(other)}) == 3
    _write(tmp_path / "r.ss", [(ok, b"1"), (other, b"2"), (bad, b"3"), (ok, b"4"), (other, b"5")])
    async with connect(redis_cluster.url) as redis:
        await redis.execute("SET", bad, "a string")
        with pytest.raises(ReplayError, match=f"#1 of '{bad}'"):
            await replay_file(tmp_path / "r.ss", redis)
        assert _payloads(await raw_entries(redis, ok)) == [b"1"]
        assert _payloads(await raw_entries(redis, other)) == [b"2"]


@pytest.mark.parametrize("start", ["ts:1000", "seq:1"])
async def test_replay_from_a_time_or_sequence_without_key_says_to_give_key(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path, start: str
) -> None:
    with StreamWriter(tmp_path / "r.ss") as writer:
        writer.append("a", seal(b"1", {}), 1000)
        writer.append("b", seal(b"2", {}), 2000)
    path = str(tmp_path / "r.ss")
    result = await trio.to_thread.run_sync(
        lambda: cli("replay", path, "--to", redis_server.url, "--from", start)
    )
    assert result.returncode == 1 and result.stdout == ""
    assert f"starting at {start} needs the one stream key" in result.stderr
    assert result.stderr.splitlines()[-1] == "  name the stream key to start in with --key NAME"
    assert await redis.execute("EXISTS", "a", "b") == 0
    with pytest.raises(StartNeedsKey, match="2 given"):
        await replay_file(path, redis, keys=["a", "b"], start=Position.timestamp(1000))
