"""A Pub/Sub recording replays each message to the channel it was recorded from.

The command-line tests run ``trio-streams record``/``replay`` in real subprocesses against a
real redis-server; the guide's own example is run as written (with the test server's URL).
"""

from __future__ import annotations

import shlex
import signal
import subprocess
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from tests.cli.support import COMMAND, ROOT
from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from trio_streams.file.writer import StreamWriter
from trio_streams.record import CHANNEL_HEADER, record_channel, replay_file
from trio_streams.record.recorder import InvalidFileKey
from trio_streams.redis.client import RedisClient
from trio_streams.redis.client.subscriber import Message
from trio_streams.redis.frames import decode_frame, encode_frame

from .support import checkout_env, command_in_background, exit_status, recorded

GUIDE = ROOT / "docs" / "guides" / "record-and-top.md"
GUIDE_URL = "redis://localhost:6379"
#: What the tests publish while a pattern is recorded: (channel, payload), in order.
PUBLISHED = [("news.eu", b"one"), ("news.us", b"two"), ("news.eu", b"three")]
#: Marks the end of a replay for a listener: published after it, heard after all of it.
END = "end-of-replay"

Heard = list[tuple[str, bytes]]


def guide_command(start: str) -> list[str]:
    """The guide's one command line that begins with ``$ start``, split as a shell would."""
    lines = [line[2:] for line in GUIDE.read_text().splitlines() if line.startswith(f"$ {start}")]
    assert len(lines) == 1, f"the guide has {len(lines)} command lines beginning {start!r}"
    return shlex.split(lines[0])


def runnable(argv: list[str], url: str) -> list[str]:
    """``argv`` (a ``trio-streams`` command) run by this interpreter, against ``url``."""
    assert argv[0] == "trio-streams"
    return [*COMMAND, *(url if arg == GUIDE_URL else arg for arg in argv[1:])]


async def record_while_publishing(
    redis: RedisClient, argv: list[str], cwd: Path, path: Path
) -> str:
    """Run the ``record`` command ``argv``, publish :data:`PUBLISHED` (and a message on a
    channel the pattern does not match) once it is subscribed, stop it with SIGINT once all
    are in ``path``; its standard output."""
    async with command_in_background(argv, cwd) as process:

        async def subscribed() -> bool:
            return int(await redis.execute("PUBSUB", "NUMPAT")) == 1

        await eventually(subscribed, within=20, what="the recording to subscribe")
        await redis.execute("PUBLISH", "sports", b"not news")
        for channel, payload in PUBLISHED:
            await redis.execute("PUBLISH", channel, payload)

        async def all_in() -> bool:
            return await trio.Path(path).exists() and len(recorded(path)) == len(PUBLISHED)

        await eventually(all_in, within=20, what="every message in the recording")
        status = await exit_status(process, signal.SIGINT)
    assert status == 0, (cwd / "err").read_text()
    return (cwd / "out").read_text()


@asynccontextmanager
async def listening(redis: RedisClient) -> AsyncIterator[Callable[[], Awaitable[Heard]]]:
    """Subscribed to every channel; the returned function publishes :data:`END` and gives
    what was heard before it: (channel, payload) in order."""
    async with redis.subscribe(patterns=["*"]) as subscription:

        async def heard() -> Heard:
            await redis.execute("PUBLISH", END, b"")
            found: Heard = []
            with trio.fail_after(20):
                async for item in subscription:
                    assert isinstance(item, Message)
                    channel = item.channel.decode()
                    if channel == END:
                        return found
                    found.append((channel, decode_frame(item.data)[0]))
            raise AssertionError("the subscription ended")  # pragma: no cover

        yield heard


async def run(argv: list[str], cwd: Path) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            argv, cwd=cwd, capture_stdout=True, capture_stderr=True, check=False,
            env=checkout_env(),
        )  # fmt: skip


# ---- the guide's example, as written ----------------------------------------------------------


@pytest.mark.slow
async def test_the_guides_pattern_example_replays_each_message_to_its_own_channel(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    record = guide_command("trio-streams record redis://localhost:6379 'news.*' --pattern")
    replay = guide_command("trio-streams replay news.ss")
    assert record == ["trio-streams", "record", GUIDE_URL, "news.*", "--pattern", "--to",
                      "news.ss"]  # fmt: skip
    out = await record_while_publishing(
        redis, runnable(record, redis_server.url), tmp_path, tmp_path / "news.ss"
    )
    assert "recorded 3 entries of pattern 'news.*' into news.ss (key 'news._'" in out
    async with listening(redis) as heard:
        result = await run(runnable(replay, redis_server.url), tmp_path)
        assert result.returncode == 0, result.stderr.decode()
        assert await heard() == PUBLISHED
    assert "replayed 3 messages of news.ss to channel 'news.eu': 2, 'news.us': 1" in (
        result.stdout.decode()
    )


# ---- the command line --------------------------------------------------------------------------


@pytest.mark.slow
async def test_a_pattern_recording_with_a_key_replays_to_the_recorded_channels_by_default(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = tmp_path / "f.ss"
    argv = [*COMMAND, "record", redis_server.url, "news.*", "--pattern", "--key", "news-all",
            "--to", str(path)]  # fmt: skip
    await record_while_publishing(redis, argv, tmp_path, path)
    assert {m[0] for m in recorded(path)} == {"news-all"}
    replay = [*COMMAND, "replay", str(path), "--to", redis_server.url, "--as", "channel"]
    async with listening(redis) as heard:
        result = await run(replay, tmp_path)
        assert result.returncode == 0, result.stderr.decode()
        assert await heard() == PUBLISHED


@pytest.mark.slow
async def test_an_explicit_target_sends_every_message_of_a_pattern_recording_to_one_channel(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    path = tmp_path / "f.ss"
    argv = [*COMMAND, "record", redis_server.url, "news.*", "--pattern", "--to", str(path)]
    await record_while_publishing(redis, argv, tmp_path, path)
    replay = [*COMMAND, "replay", str(path), "--to", redis_server.url, "--as", "channel",
              "--stream", "news-all"]  # fmt: skip
    async with listening(redis) as heard:
        result = await run(replay, tmp_path)
        assert result.returncode == 0, result.stderr.decode()
        assert await heard() == [("news-all", payload) for _, payload in PUBLISHED]
    assert "to channel 'news-all': 3" in result.stdout.decode()


# ---- the library -------------------------------------------------------------------------------


def mixed_recording(path: Path) -> None:
    """Messages with and without a recorded channel, under two keys."""
    from trio_streams.file.envelope import seal

    with StreamWriter(path) as writer:
        writer.append("news-all", seal(b"a", {CHANNEL_HEADER: "news.eu", "k": "v"}))
        writer.append("orders", seal(b"b", {"k": "w"}))  # a stream's entry: no channel
        writer.append("news-all", seal(b"c", {CHANNEL_HEADER: "news.us"}))


async def test_a_message_without_a_recorded_channel_goes_to_the_channel_of_its_key(
    redis: RedisClient, tmp_path: Path
) -> None:
    mixed_recording(tmp_path / "f.ss")
    async with listening(redis) as heard:
        summary = await replay_file(tmp_path / "f.ss", redis, target="channel")
        assert await heard() == [("news.eu", b"a"), ("orders", b"b"), ("news.us", b"c")]
    assert summary.per_key == {"news.eu": 1, "orders": 1, "news.us": 1}


async def test_the_recorded_channel_is_not_sent_as_a_header_unless_kept(
    redis: RedisClient, tmp_path: Path
) -> None:
    mixed_recording(tmp_path / "f.ss")
    frames: list[tuple[str, dict[str, str]]] = []
    async with redis.subscribe(["news.eu"]) as subscription:
        await replay_file(tmp_path / "f.ss", redis, target="channel", keys=["news-all"])
        await replay_file(
            tmp_path / "f.ss", redis, target="channel", keys=["news-all"], keep=[CHANNEL_HEADER]
        )
        with trio.fail_after(20):
            async for item in subscription:
                assert isinstance(item, Message)
                frames.append((item.channel.decode(), decode_frame(item.data)[1]))
                if len(frames) == 2:
                    break
    assert frames == [("news.eu", {"k": "v"}), ("news.eu", {"k": "v", CHANNEL_HEADER: "news.eu"})]


@pytest.mark.parametrize("target", ["stream", "list"])
async def test_a_recorded_channel_does_not_rename_stream_entries_or_list_elements(
    redis: RedisClient, tmp_path: Path, target: str
) -> None:
    mixed_recording(tmp_path / "f.ss")
    summary = await replay_file(tmp_path / "f.ss", redis, target=target)  # type: ignore[arg-type]
    assert summary.per_key == {"news-all": 2, "orders": 1}


async def test_a_pattern_recorded_without_a_key_is_kept_under_the_pattern_made_a_file_key(
    redis: RedisClient, tmp_path: Path
) -> None:
    subscribed = trio.Event()
    with StreamWriter(tmp_path / "r.ss") as writer:
        async with trio.open_nursery() as nursery:

            async def record() -> None:
                await record_channel(
                    redis, "orders:[eu]*", writer, pattern=True, limit=1,
                    on_subscribed=subscribed.set,
                )  # fmt: skip

            nursery.start_soon(record)
            await subscribed.wait()
            await redis.execute("PUBLISH", "orders:e1", encode_frame(b"x", {}))
    assert [(m[0], m[4]) for m in recorded(tmp_path / "r.ss")] == [
        ("orders_eu_", {CHANNEL_HEADER: "orders:e1"})
    ]


async def test_a_channel_whose_name_cannot_be_a_file_key_still_needs_a_key(
    redis: RedisClient, tmp_path: Path
) -> None:
    with (
        StreamWriter(tmp_path / "r.ss") as writer,
        pytest.raises(InvalidFileKey, match="the channel 'orders:eu'"),
    ):
        await record_channel(redis, "orders:eu", writer)
