"""The way from a write to a live reader: what a wake-up skips, and why nothing is missed.

A follower woken by inotify reads the event queue once and the file once before it hands a
message over; it looks at the file's size and link count only before waiting again after a
wake-up that brought nothing (the event may be the file's removal), or when it has no OS watch.
A reader whose read comes back short takes it as the end of the file, as the empty read that
would follow would say. A live subscription that handed a batch over lets the handler run before
its reader looks at the file again. Each shortcut is checked here against what the longer way
would have seen.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams.file import FilePosition, FileStream
from trio_streams.file.errors import FileRemovedError
from trio_streams.file.follower import FileSource
from trio_streams.file.format import Message
from trio_streams.file.reader import READ_CHUNK, FileReader
from trio_streams.file.watch import FileWatch, WatchRegistry
from trio_streams.file.writer import StreamWriter

from .apps import file_app

GUARD = 30  # seconds: a wait that is never woken fails the test instead of hanging it


async def _quiet_until_backoff(source: FileSource, backoff_ms: int) -> None:
    """Wait at the tip of a quiet file until the polling timeout has grown to ``backoff_ms``:
    a wait that then returns at once was woken by the watch, not by its timeout."""
    while source.backoff_ms < backoff_ms:
        assert source.read_available() == []
        await source.wait()


# ---- the inotify queue is read once per wake-up


async def test_events_queued_after_a_wake_up_wake_the_next_wait(tmp_path: Path) -> None:
    path = tmp_path / "w.ss"
    writer = StreamWriter(path)
    watch = FileWatch(str(path))
    try:
        assert watch.uses_os_events
        with trio.fail_after(GUARD):
            for i in range(20):
                seen = watch.generation
                writer.append("k", b"%d" % i)
                writer.flush()
                if i % 2:
                    writer.append("k", b"again")
                    writer.flush()  # two batches of events before the wait reads any
                await watch.wait_change(seen)
                assert watch.generation == seen + 1
    finally:
        watch._close_fd()
        writer.close()


async def test_many_events_in_one_queue_are_read_in_one_wake_up_or_wake_the_next(
    tmp_path: Path,
) -> None:
    path = tmp_path / "many.ss"
    writer = StreamWriter(path)
    watch = FileWatch(str(path))
    try:
        for i in range(5000):  # enough events to fill more than one read of the queue
            writer.append("k", b"%d" % i)
            writer.flush()
            os.chmod(path, 0o644 if i % 2 else 0o600)
        with trio.fail_after(GUARD):
            seen = watch.generation
            await watch.wait_change(seen)
        # Whatever the first wake-up left queued wakes a later wait at once; then it is empty.
        with trio.move_on_after(0.05):
            while True:
                seen = watch.generation
                await watch.wait_change(seen)
        assert not _readable(watch)
    finally:
        watch._close_fd()
        writer.close()


def _readable(watch: FileWatch) -> bool:
    try:
        return bool(os.read(watch._fd, 65536))
    except BlockingIOError:
        return False


# ---- no stat between the wake-up and the read: the watch tells of any change


async def test_a_write_between_the_read_and_the_wait_wakes_the_wait_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "between.ss"
    writer = StreamWriter(path)
    with trio.fail_after(GUARD):
        async with await FileSource.open(path, mode="live") as source:
            await _quiet_until_backoff(source, 256)
            for i in range(10):
                assert source.read_available() == []
                writer.append("k", b"%d" % i)
                writer.flush()  # after the read reached the end, before the wait
                backoff = source.backoff_ms
                await source.wait()
                assert source.backoff_ms == backoff  # woken by the watch, not timed out
                assert [m.payload for m in source.read_available()] == [b"%d" % i]
                await _quiet_until_backoff(source, 256)
    writer.close()


async def test_a_wait_looks_at_the_file_only_after_a_wake_up_that_brought_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "stats.ss"
    writer = StreamWriter(path)
    calls: list[str] = []
    with trio.fail_after(GUARD):
        async with await FileSource.open(path, mode="live") as source:
            await _quiet_until_backoff(source, 256)
            real_stat, real_wait_change = FileReader.stat, FileWatch.wait_change

            def stat(self: FileReader) -> os.stat_result:
                calls.append("stat")
                return real_stat(self)

            async def wait_change(self: FileWatch, seen: int) -> None:
                calls.append("wait")
                await real_wait_change(self, seen)

            monkeypatch.setattr(FileReader, "stat", stat)
            monkeypatch.setattr(FileWatch, "wait_change", wait_change)
            writer.append("k", b"x")
            writer.flush()
            await source.wait()
            assert len(source.read_available()) == 1
            os.chmod(path, 0o600)  # an event that brings nothing to read
            await source.wait()
            assert source.read_available() == []
            assert calls == ["wait", "wait"]  # from each wake-up to the read: no stat
            await source.wait()  # after a wake-up that brought nothing: looks first
            assert calls[: 2 + 2] == ["wait", "wait", "stat", "wait"]
    writer.close()


async def test_a_removal_while_waiting_ends_the_follower_after_what_was_written(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gone.ss"
    writer = StreamWriter(path)
    got: list[Message] = []
    removed: list[bool] = []
    with trio.fail_after(GUARD):
        async with await FileSource.open(path, mode="live") as source:

            async def follow() -> None:
                while True:
                    batch = source.read_available()
                    got.extend(batch)
                    if not batch:
                        try:
                            await source.wait()
                        except FileRemovedError:
                            removed.append(True)
                            return

            async def write_then_remove() -> None:
                await trio.testing.wait_all_tasks_blocked()  # the follower is waiting
                writer.append("k", b"last words")
                writer.flush()
                os.remove(path)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write_then_remove)
                await follow()
    assert removed == [True]
    assert [m.payload for m in got] == [b"last words"]
    writer.close()


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
async def test_a_follower_sees_every_message_whatever_the_writes_race(
    tmp_path: Path, inotify: bool
) -> None:
    """Writes land before, during and after each read and wait; every message arrives once,
    in order, with or without an OS watch."""
    path = tmp_path / "race.ss"
    writer = StreamWriter(path, beacon_interval=1024)
    got: list[Message] = []
    registry = WatchRegistry(inotify=inotify)
    with trio.fail_after(GUARD):
        async with await FileSource.open(path, mode="live", registry=registry) as source:

            async def write() -> None:
                for i in range(400):
                    writer.append("k", b"%d" % i * (i % 50))
                    if i % 3:
                        writer.flush()
                    if i % 5 == 0:
                        await trio.lowlevel.checkpoint()
                    if i % 37 == 0:
                        await trio.sleep(0.002)
                writer.flush()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(write)
                while len(got) < 400:
                    batch = source.read_available(7)
                    got.extend(batch)
                    if not batch:
                        await source.wait()
    assert [m.seq for m in got] == list(range(1, 401))
    writer.close()


# ---- a short read is the end of the file


def _write(path: Path, sizes: list[int], *, eos: bool = False) -> None:
    with StreamWriter(path, beacon_interval=1024) as writer:
        for i, size in enumerate(sizes):
            writer.append("k", bytes([i % 251]) * size)
        if eos:
            writer.close(eos=True)


def _all_messages(path: Path) -> list[tuple[int, bytes]]:
    with FileReader(path) as reader:
        return [(m.seq, m.payload) for m in reader]


@pytest.mark.parametrize(
    "sizes",
    [
        [10],
        [100] * 50,
        [READ_CHUNK // 2, READ_CHUNK // 2],  # the file ends just past one chunk
        [READ_CHUNK - 200],  # a whole chunk's worth, read in one short read
        [READ_CHUNK * 2 + 17, 5, 5],  # a frame longer than a chunk
    ],
    ids=["one", "fifty", "two-halves", "near-a-chunk", "longer-than-a-chunk"],
)
@pytest.mark.parametrize("max_n", [1, 3, 1000])
def test_a_short_read_reaches_the_end_as_an_empty_read_would(
    tmp_path: Path, sizes: list[int], max_n: int
) -> None:
    path = tmp_path / "short.ss"
    _write(path, sizes)
    expected = _all_messages(path)
    got: list[tuple[int, bytes]] = []
    with FileReader(path, on_eos="hold", start=FilePosition.beginning()) as reader:
        for _ in range(10_000):
            batch = reader.read_messages(max_n)
            got.extend((m.seq, m.payload) for m in batch)
            if reader.at_eof:
                # The end, as reported: the file holds nothing after what was read, and
                # nothing whole is left in the buffer for a follower that would now wait.
                assert os.pread(reader._fd, 1, reader.decoder.fed_end) == b""
                assert reader.decoder.next_messages(1) == []
            if not batch and reader.at_eof:
                break
    assert got == expected


def test_a_read_that_fills_its_count_at_the_end_does_not_claim_the_end(tmp_path: Path) -> None:
    path = tmp_path / "exact.ss"
    _write(path, [10] * 6)
    with FileReader(path, on_eos="hold", start=FilePosition.beginning()) as reader:
        assert len(reader.read_messages(3)) == 3
        assert not reader.at_eof  # three more are buffered: a follower must read, not wait
        assert len(reader.read_messages(3)) == 3
        assert reader.read_messages(3) == []
        assert reader.at_eof


def test_a_short_read_that_ends_at_a_trailing_eos_waits_there(tmp_path: Path) -> None:
    path = tmp_path / "eos.ss"
    _write(path, [10] * 4, eos=True)
    with FileReader(path, on_eos="hold", start=FilePosition.beginning()) as reader:
        assert len(reader.read_messages(100)) == 4
        assert reader.eos is None  # held, not delivered: a writer reopening overwrites it
        assert reader.read_messages(100) == []
        assert reader.at_eof and reader.eos is None
        with StreamWriter(path) as writer:
            writer.append("k", b"after")
        assert [m.payload for m in reader.read_messages(100)] == [b"after"]


def test_a_short_read_that_ends_inside_a_frame_reads_it_again_once_whole(
    tmp_path: Path,
) -> None:
    path = tmp_path / "cut.ss"
    _write(path, [10] * 3)
    whole = path.read_bytes()
    with StreamWriter(path) as writer:
        writer.append("k", b"the last one")
    frame = path.read_bytes()[len(whole) :]
    path.write_bytes(whole + frame[:9])  # a frame still being written
    with FileReader(path, on_eos="hold", start=FilePosition.beginning()) as reader:
        assert len(reader.read_messages(100)) == 3
        assert reader.at_eof
        with open(path, "ab") as out:
            out.write(frame[9:])
        assert [m.payload for m in reader.read_messages(100)] == [b"the last one"]


# ---- the handler runs before the reader looks again


async def test_the_handler_of_a_live_message_runs_before_its_reader_waits_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "turn.ss"
    StreamWriter(path).close()
    read: list[bytes] = []
    handled: list[bytes] = []
    unhandled_at_wait: list[list[bytes]] = []
    real_read, real_wait = FileSource.read_available, FileSource.wait

    def read_available(self: FileSource, max_n: int = 1024) -> list[Message]:
        batch = real_read(self, max_n)
        read.extend(m.payload for m in batch)
        return batch

    async def wait(self: FileSource) -> None:
        if len(read) != len(handled):
            unhandled_at_wait.append(read[len(handled) :])
        await real_wait(self)

    monkeypatch.setattr(FileSource, "read_available", read_available)
    monkeypatch.setattr(FileSource, "wait", wait)
    app, broker = file_app(path, existing_only=True)

    send, receive = trio.open_memory_channel[None](20)

    @broker.subscriber(FileStream("k"))
    async def handle(payload: bytes) -> None:
        handled.append(payload)
        send.send_nowait(None)

    with trio.fail_after(GUARD):
        async with serving(app):
            with StreamWriter(path) as writer:
                for i in range(20):
                    writer.append("k", b"%d" % i)
                    writer.flush()
                    await receive.receive()  # handled: the next write wakes a waiting reader
    assert handled == [b"%d" % i for i in range(20)]
    # Woken by each write, the reader handed the message over and let the handler run before
    # it went back to wait.
    assert unhandled_at_wait == []


async def test_an_idle_live_app_that_handled_a_message_uses_almost_no_cpu(tmp_path: Path) -> None:
    path = tmp_path / "idle.ss"
    StreamWriter(path).close()
    app, broker = file_app(path, existing_only=True)
    handled = trio.Event()

    @broker.subscriber(FileStream("k"))
    async def handle(payload: bytes) -> None:
        handled.set()

    with trio.fail_after(GUARD):
        async with serving(app):
            with StreamWriter(path) as writer:
                writer.append("k", b"one")
            await handled.wait()
            await trio.sleep(0.2)  # past the first, fast polls
            cpu = time.process_time()
            wall = time.perf_counter()
            await trio.sleep(1.0)  # the window measured, not a synchronisation
            used = time.process_time() - cpu
            elapsed = time.perf_counter() - wall
    # A spinning reader uses a whole core (~1 s of CPU per second); an idle one, almost none.
    assert used < 0.25 * elapsed, f"{used:.3f} s of CPU in {elapsed:.3f} s while idle"


async def test_a_burst_after_a_live_hand_over_arrives_whole_and_in_order(tmp_path: Path) -> None:
    """After a hand-over the subscription's ``poll`` defers to ``read`` (which looks once the
    handler had its turn): nothing written meanwhile is skipped or reordered."""
    path = tmp_path / "burst.ss"
    StreamWriter(path).close()
    app, broker = file_app(path, existing_only=True)
    handled: list[int] = []
    first, last = trio.Event(), trio.Event()

    @broker.subscriber(FileStream("k"))
    async def handle(n: int) -> None:
        handled.append(n)
        first.set()
        if n == 500:
            last.set()

    with trio.fail_after(GUARD):
        async with serving(app):
            with StreamWriter(path) as writer:
                writer.append("k", b"0")
                writer.flush()
                await first.wait()
                for n in range(1, 501):
                    writer.append("k", b"%d" % n)
                    if n % 3 == 0 or n == 500:
                        writer.flush()
                    if n % 50 == 0:
                        await trio.lowlevel.checkpoint()
            await last.wait()
    assert handled == list(range(501))
