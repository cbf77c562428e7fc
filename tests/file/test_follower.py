"""The Trio source: live follow (writer task, writer process), replay, removal, seeks, waits."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from trio_streams.file import FilePosition
from trio_streams.file.errors import FileRemovedError, SeekOutOfRangeError, TruncatedError
from trio_streams.file.follower import MAX_BACKOFF_MS, FileSource
from trio_streams.file.format import Message
from trio_streams.file.watch import WatchRegistry
from trio_streams.file.writer import StreamWriter

from .conftest import ALL_SS


async def _collect(source: FileSource, count: int) -> list[Message]:
    got: list[Message] = []
    while len(got) < count:
        batch = source.read_available(1024)
        got.extend(batch)
        if not batch:
            assert not source.ended
            await source.wait()
    return got


async def _replay_all(source: FileSource) -> list[Message]:
    got: list[Message] = []
    while True:
        batch = source.read_available(100)
        got.extend(batch)
        if not batch:
            if source.ended:
                return got
            await source.wait()


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
async def test_live_follow_of_a_writer_task(tmp_path: Path, inotify: bool) -> None:
    path = tmp_path / "live.ss"
    writer = StreamWriter(path, beacon_interval=1024)
    writer.append("old", b"before the follower started")
    writer.flush()
    registry = WatchRegistry(inotify=inotify)

    async def write_slowly() -> None:
        for i in range(300):
            writer.append("k", b"%d" % i * 20)
            if i % 7 == 0:
                writer.flush()
                await trio.sleep(0.001)
        writer.flush()

    with trio.fail_after(30):
        async with await FileSource.open(path, mode="live", registry=registry) as source:
            assert source.watch.uses_os_events == inotify
            async with trio.open_nursery() as nursery:
                nursery.start_soon(write_slowly)
                got = await _collect(source, 300)
    writer.close()
    assert [m.seq for m in got] == list(range(1, 301))
    assert {m.stream_key for m in got} == {"k"}


async def test_live_follow_of_a_writer_process(tmp_path: Path) -> None:
    path = tmp_path / "proc.ss"
    StreamWriter(path, beacon_interval=2048).close()
    code = textwrap.dedent(
        f"""
        import time
        from trio_streams.file.writer import StreamWriter
        with StreamWriter({str(path)!r}) as writer:
            for i in range(200):
                writer.append("orders", b"order-%d" % i)
                writer.flush()
                if i % 20 == 0:
                    time.sleep(0.01)
        """
    )
    with trio.fail_after(60):
        async with await FileSource.open(path, mode="live", keys=["orders"]) as source:
            process = await trio.lowlevel.open_process([sys.executable, "-c", code])
            try:
                got = await _collect(source, 200)
            finally:
                assert await process.wait() == 0
    assert [m.payload for m in got] == [b"order-%d" % i for i in range(200)]


async def test_removal_ends_a_follower_after_what_was_written(tmp_path: Path) -> None:
    path = tmp_path / "gone.ss"
    writer = StreamWriter(path)
    with trio.fail_after(30):
        async with await FileSource.open(path, mode="live") as source:
            writer.append("k", b"last words")
            writer.flush()
            os.remove(path)
            got = source.read_available()
            assert [m.payload for m in got] == [b"last words"]
            with pytest.raises(FileRemovedError) as error:
                await _collect(source, 1)
    assert str(path) in str(error.value)
    writer.close()


async def test_replay_ends_after_the_last_message_or_at_eos(tmp_path: Path) -> None:
    for vector in ALL_SS:
        async with await FileSource.open(vector, mode="replay") as source:
            got = await _replay_all(source)
            assert got
            assert source.read_available() == []
            assert source.ended


async def test_replay_of_a_cut_file_raises_after_the_good_messages(tmp_path: Path) -> None:
    source_path = next(p for p in ALL_SS if p.name == "one-key-1024.ss")
    path = tmp_path / "cut.ss"
    path.write_bytes(source_path.read_bytes()[:-70])
    async with await FileSource.open(path, mode="replay") as source:
        got = source.read_available(500)
        assert len(got) == 199
        with pytest.raises(TruncatedError):
            source.read_available(50)


async def test_one_watch_per_file_however_many_followers(tmp_path: Path) -> None:
    path = tmp_path / "shared.ss"
    registry = WatchRegistry()
    writer = StreamWriter(path)
    sources = [await FileSource.open(path, mode="live", registry=registry) for _ in range(3)]
    assert len(registry) == 1
    assert len({id(s.watch) for s in sources}) == 1
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            results: list[list[Message]] = []

            async def follow(source: FileSource) -> None:
                results.append(await _collect(source, 50))

            for source in sources:
                nursery.start_soon(follow, source)
            await trio.sleep(0.01)
            for i in range(50):
                writer.append("k", b"%d" % i)
                writer.flush()
                await trio.lowlevel.checkpoint()
    assert [len(r) for r in results] == [50, 50, 50]
    for source in sources:
        await source.aclose()
    assert len(registry) == 0
    writer.close()


async def test_backoff_doubles_to_the_cap_and_resets_on_data(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "quiet.ss"
    writer = StreamWriter(path)
    async with await FileSource.open(
        path, mode="live", registry=WatchRegistry(inotify=False)
    ) as source:
        seen = []
        for _ in range(13):
            assert source.read_available() == []
            seen.append(source.backoff_ms)
            await source.wait()
        assert seen == [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 1024, 1024]
        writer.append("k", b"x")
        writer.flush()
        await source.wait()
        assert len(source.read_available()) == 1
        assert source.backoff_ms == 1 < MAX_BACKOFF_MS
    writer.close()


async def test_cancelling_wait_loses_nothing(tmp_path: Path) -> None:
    path = tmp_path / "cancel.ss"
    writer = StreamWriter(path)
    got: list[Message] = []
    with trio.fail_after(30):
        async with await FileSource.open(path, mode="live") as source:
            for i in range(20):
                with trio.move_on_after(0.0005 * (i % 3)):
                    got.extend(source.read_available())
                    await source.wait()
                writer.append("k", b"%d" % i)
                if i % 2:
                    writer.flush()
            writer.flush()
            got.extend(await _collect(source, 20 - len(got)))
    assert [m.seq for m in got] == list(range(1, 21))
    writer.close()


async def test_live_follower_holds_at_eos_and_follows_a_reopened_writer(tmp_path: Path) -> None:
    path = tmp_path / "eos.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        for i in range(5):
            writer.append("k", bytes(100), i)
        writer.close(eos=True)
    with trio.fail_after(30):
        async with await FileSource.open(path, mode="live") as source:
            assert source.read_available() == []
            with StreamWriter(path) as writer:
                writer.append("k", b"resumed")
            await source.wait()
            got = await _collect(source, 1)
    assert got[0].payload == b"resumed"
    assert got[0].seq == 6


async def test_seek_in_a_source(tmp_path: Path) -> None:
    path = next(p for p in ALL_SS if p.name == "three-keys-2048.ss")
    async with await FileSource.open(path, mode="replay", keys=["payments"]) as source:
        everything = await _replay_all(source)
        assert source.read_available() == []
        with trio.CancelScope(shield=True):
            await source.seek(FilePosition.sequence(everything[10].seq))
        assert source.read_available(1) == [everything[10]]
        offset = source.offset
        with pytest.raises(SeekOutOfRangeError):
            await source.seek(FilePosition.timestamp(everything[-1].timestamp_ms))
        assert source.offset == offset
        assert source.read_available(1) == [everything[11]]
        await source.seek(FilePosition.beginning())
        assert source.read_available(1) == [everything[0]]
        await source.seek(FilePosition.end())
        assert source.read_available() == []
