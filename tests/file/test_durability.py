"""The durability setting of stream-file writes: what each promise syncs, and when.

Syncs are counted through a real file: ``durability._sync`` (``fdatasync``) is wrapped, not
replaced, so every counted sync also happened. A power loss cannot be tested here; what can be is
that a receipt is given only after its sync, that a killed writer's receipts are all in the file,
and that each setting syncs as often as it says and no more.
"""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import App, ConfigurationError
from trio_streams.file import (
    DurabilitySettingError,
    FileBroker,
    FilePublisher,
    StreamFileError,
    StreamWriter,
)
from trio_streams.file import durability as durability_module
from trio_streams.file import writer as writer_module
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import WriterRegistry

ROOT = Path(__file__).parents[2]


@dataclass
class Syncs:
    """The data syncs made (each a real one), with the file's size when each began."""

    sizes: list[int] = field(default_factory=list)
    directories: list[str] = field(default_factory=list)
    #: Called at each data sync, after it (from whichever thread made it).
    after: Callable[[], None] | None = None

    @property
    def count(self) -> int:
        return len(self.sizes)


@pytest.fixture
def syncs(monkeypatch: pytest.MonkeyPatch) -> Syncs:
    counted = Syncs()
    real_sync, real_directory = durability_module._sync, durability_module.sync_directory

    def sync(fd: int) -> None:
        counted.sizes.append(os.fstat(fd).st_size)
        real_sync(fd)
        if counted.after is not None:
            counted.after()

    def sync_directory(path: str) -> None:
        counted.directories.append(path)
        real_directory(path)

    monkeypatch.setattr(durability_module, "_sync", sync)
    monkeypatch.setattr(writer_module, "sync_directory", sync_directory)
    return counted


class Clock:
    """``time`` for the writer module with a ``monotonic`` the test moves."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.time_ns = __import__("time").time_ns

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(writer_module, "time", fake)
    return fake


def existing(path: Path, syncs: Syncs) -> Path:
    """``path`` created (a header written and synced), the syncs counted from here on."""
    StreamWriter(path).close()
    syncs.sizes.clear()
    syncs.directories.clear()
    return path


def messages(path: Path) -> list[tuple[str, int, bytes]]:
    with FileReader(path) as reader:
        return [(m.stream_key, m.seq, m.payload) for m in reader]


# ---- "publish": a receipt is given once its message is on disk -------------------------------


def test_with_durability_publish_a_receipt_is_given_after_its_message_is_synced(
    tmp_path: Path, syncs: Syncs
) -> None:
    with StreamWriter(tmp_path / "f.ss", durability="publish") as writer:
        for n in range(1, 4):
            receipt = writer.publish("k", b"x" * n)
            assert syncs.count == n
            assert receipt.offset < syncs.sizes[-1] == os.path.getsize(writer.path)
    assert syncs.count == 3  # closing had nothing left to sync


async def test_with_durability_publish_an_async_receipt_is_given_after_its_message_is_synced(
    tmp_path: Path, syncs: Syncs
) -> None:
    writer = StreamWriter(tmp_path / "f.ss", durability="publish")
    receipts = [await writer.apublish("k", b"x") for _ in range(3)]
    assert syncs.count == 3
    assert [r.offset < size for r, size in zip(receipts, syncs.sizes, strict=True)] == [True] * 3
    await writer.aclose()


async def test_with_durability_publish_a_cancelled_publish_that_wrote_still_syncs(
    tmp_path: Path, syncs: Syncs
) -> None:
    writer = StreamWriter(tmp_path / "f.ss", durability="publish")
    with trio.CancelScope() as scope:
        scope.cancel()  # pending before the call: it never takes the lock
        await writer.apublish("k", b"never")
    assert syncs.count == 0 and messages(Path(writer.path)) == []
    synced = trio.Event()
    syncs.after = lambda: trio.from_thread.run_sync(synced.set)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.apublish, "k", b"written")
        await trio.testing.wait_all_tasks_blocked()  # in the sync's worker thread
        nursery.cancel_scope.cancel()  # the write is done: the sync completes, shielded
    assert synced.is_set() and syncs.count == 1
    assert messages(Path(writer.path)) == [("k", 1, b"written")]
    await writer.aclose()


def test_with_durability_publish_a_batch_is_synced_once(tmp_path: Path, syncs: Syncs) -> None:
    with StreamWriter(tmp_path / "f.ss", durability="publish") as writer:
        receipts = writer.publish_many([("k", b"%d" % n, None) for n in range(100)])
        assert syncs.count == 1 and receipts[-1].offset < syncs.sizes[0]


async def test_with_durability_publish_an_async_batch_is_synced_once(
    tmp_path: Path, syncs: Syncs
) -> None:
    writer = StreamWriter(tmp_path / "f.ss", durability="publish")
    await writer.apublish_many([("k", b"%d" % n, None) for n in range(100)])
    assert syncs.count == 1
    await writer.aclose()


def test_with_durability_publish_a_flush_returns_after_the_sync(
    tmp_path: Path, syncs: Syncs
) -> None:
    with StreamWriter(tmp_path / "f.ss", durability="publish") as writer:
        writer.append("k", b"1")
        writer.append("k", b"2")
        assert syncs.count == 0  # buffered, not written
        writer.flush()
        assert syncs.sizes == [os.path.getsize(writer.path)]


# ---- "interval": at most sync_interval seconds of receipts at risk ----------------------------


async def test_with_durability_interval_keep_synced_syncs_a_write_within_the_interval(
    tmp_path: Path, syncs: Syncs, autojump_clock: trio.testing.MockClock
) -> None:
    path = existing(tmp_path / "f.ss", syncs)
    writer = StreamWriter(path, durability="interval", sync_interval=5)
    began: list[float] = []
    real_afsync = writer.afsync

    async def afsync() -> None:
        began.append(trio.current_time())
        await real_afsync()

    writer.afsync = afsync  # type: ignore[method-assign]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.keep_synced)
        await trio.sleep(100)  # idle: nothing to sync, nothing done (it waits, never polls)
        assert began == []
        published_at = trio.current_time()
        receipt = await writer.apublish("k", b"x")
        assert syncs.count == 0  # the receipt did not wait for the disk
        await trio.sleep(100)
        assert began == [published_at + 5]  # one sync, the interval after the write
        nursery.cancel_scope.cancel()  # and waits for that sync to end
    assert syncs.count == 1 and receipt.offset < syncs.sizes[0]
    await writer.aclose()
    assert syncs.count == 1  # nothing written since


async def test_with_durability_interval_writes_within_one_interval_share_one_sync(
    tmp_path: Path, syncs: Syncs, autojump_clock: trio.testing.MockClock
) -> None:
    writer = StreamWriter(tmp_path / "f.ss", durability="interval", sync_interval=5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.keep_synced)
        for _ in range(50):
            await writer.apublish("k", b"x")
            await trio.sleep(0.09)  # 50 publishes in 4.5 s
        await trio.sleep(100)
        nursery.cancel_scope.cancel()  # after a sync under way ends
    assert syncs.count == 1
    await writer.aclose()


def test_with_durability_interval_without_keep_synced_the_first_write_an_interval_after_the_last_sync_syncs(  # noqa: E501
    tmp_path: Path, syncs: Syncs, clock: Clock
) -> None:
    with StreamWriter(tmp_path / "f.ss", durability="interval", sync_interval=2) as writer:
        writer.publish("k", b"1")
        clock.now += 1.9
        writer.publish("k", b"2")
        assert syncs.count == 0
        clock.now += 0.1
        writer.publish("k", b"3")
        assert syncs.sizes == [os.path.getsize(writer.path)]
        clock.now += 1
        writer.publish("k", b"4")
        assert syncs.count == 1
    assert syncs.count == 2  # closing syncs the rest


async def test_with_durability_interval_and_keep_synced_running_publishing_never_waits_for_a_sync(
    tmp_path: Path, syncs: Syncs, clock: Clock, autojump_clock: trio.testing.MockClock
) -> None:
    path = existing(tmp_path / "f.ss", syncs)
    writer = StreamWriter(path, durability="interval", sync_interval=5)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(writer.keep_synced)
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(3):
            clock.now += 60  # long past the interval: without keep_synced, this write syncs
            await writer.apublish("k", b"x")
            writer.publish("k", b"y")
            assert syncs.count == 0
        nursery.cancel_scope.cancel()
    await writer.aclose()
    assert syncs.count == 1


async def test_keep_synced_is_cancelled_at_once_while_it_waits(
    tmp_path: Path, syncs: Syncs, autojump_clock: trio.testing.MockClock
) -> None:
    path = existing(tmp_path / "f.ss", syncs)
    writer = StreamWriter(path, durability="interval", sync_interval=5)
    for wait in (10.0, 1.0):  # waiting for a write; then sleeping out the interval after one
        if wait == 1.0:
            await writer.apublish("k", b"x")
        start = trio.current_time()
        with trio.move_on_after(wait) as scope:
            await writer.keep_synced()
        assert scope.cancelled_caught and trio.current_time() - start == wait
    assert syncs.count == 0
    await writer.aclose()


async def test_keep_synced_lets_a_sync_under_way_finish_when_cancelled(
    tmp_path: Path, syncs: Syncs, autojump_clock: trio.testing.MockClock
) -> None:
    writer = StreamWriter(tmp_path / "f.ss", durability="interval", sync_interval=1)
    await writer.apublish("k", b"x")
    in_sync = trio.Event()
    syncs.after = lambda: trio.from_thread.run_sync(in_sync.set)
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer.keep_synced)
            await in_sync.wait()  # set from inside the sync, before it returns
            scope.cancel()
    assert syncs.count == 1 and not writer._unsynced
    await writer.aclose()


async def test_keep_synced_ends_when_its_writer_is_closed(tmp_path: Path) -> None:
    writer = StreamWriter(tmp_path / "f.ss", durability="interval")
    writer.close()
    with trio.fail_after(5):
        await writer.keep_synced()


# ---- "close": only closing syncs ---------------------------------------------------------------


def test_with_durability_close_only_closing_syncs(
    tmp_path: Path, syncs: Syncs, clock: Clock
) -> None:
    with StreamWriter(tmp_path / "f.ss", durability="close") as writer:
        for _ in range(10):
            writer.publish("k", b"x")
            clock.now += 3600
        writer.publish_many([("k", b"y", None)] * 10)
        assert syncs.count == 0
    assert syncs.sizes == [os.path.getsize(writer.path)]


def test_a_writer_that_created_its_file_syncs_the_directory_at_its_first_sync(
    tmp_path: Path, syncs: Syncs
) -> None:
    path = tmp_path / "f.ss"
    with StreamWriter(path, durability="publish") as writer:
        writer.publish("k", b"1")
        writer.publish("k", b"2")
    assert syncs.directories == [str(path)] and syncs.count == 2
    with StreamWriter(path, durability="publish") as writer:  # it exists: no directory sync
        writer.publish("k", b"3")
    assert syncs.directories == [str(path)]


def test_a_sync_that_fails_raises_naming_the_file_and_stays_owed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    path = tmp_path / "f.ss"
    writer = StreamWriter(path, durability="publish")
    monkeypatch.setattr(durability_module, "_sync", failing)
    with pytest.raises(StreamFileError, match=r"f\.ss: sync to disk failed: .*Input/output"):
        writer.publish("k", b"x")
    assert writer._unsynced  # closing tries again
    monkeypatch.undo()
    writer.close()
    assert messages(path) == [("k", 1, b"x")]


# ---- settings ---------------------------------------------------------------------------------

BAD_SETTINGS: list[tuple[dict[str, Any], str]] = [
    ({"durability": "fsync"}, "durability"),
    ({"durability": None}, "durability"),
    ({"durability": "interval", "sync_interval": 0}, "sync_interval"),
    ({"durability": "interval", "sync_interval": -1}, "sync_interval"),
    ({"durability": "interval", "sync_interval": math.inf}, "sync_interval"),
    ({"durability": "interval", "sync_interval": math.nan}, "sync_interval"),
    ({"durability": "interval", "sync_interval": "1"}, "sync_interval"),
    ({"durability": "interval", "sync_interval": True}, "sync_interval"),
    ({"durability": "publish", "sync_interval": 1}, "sync_interval"),
    ({"durability": "close", "sync_interval": 1}, "sync_interval"),
]


@pytest.mark.parametrize(("settings", "parameter"), BAD_SETTINGS)
@pytest.mark.parametrize("where", ["StreamWriter", "FileBroker", "FilePublisher"])
def test_invalid_settings_are_refused_with_a_typed_error_naming_the_parameter(
    tmp_path: Path, settings: dict[str, Any], parameter: str, where: str
) -> None:
    path = tmp_path / "f.ss"
    make = {"StreamWriter": StreamWriter, "FileBroker": FileBroker, "FilePublisher": FilePublisher}
    with pytest.raises(DurabilitySettingError) as raised:
        make[where](path, **settings)
    assert isinstance(raised.value, ConfigurationError)
    assert raised.value.parameter == parameter and str(raised.value).startswith(f"{parameter}: ")
    assert not path.exists()  # refused before anything was created


def test_the_default_is_interval_with_one_second(tmp_path: Path) -> None:
    with StreamWriter(tmp_path / "f.ss") as writer:
        assert (writer.durability, writer.sync_interval) == ("interval", 1.0)
    broker = FileBroker(tmp_path / "f.ss")
    assert (broker.durability, broker.sync_interval) == ("interval", 1.0)


def test_publishers_sharing_a_writer_get_the_strongest_promise_any_asked_for(
    tmp_path: Path,
) -> None:
    registry = WriterRegistry()
    path = tmp_path / "f.ss"
    first = registry.acquire(path, durability="close")
    writer = first.writer
    assert (writer.durability, writer.sync_interval) == ("close", math.inf)
    registry.acquire(path, durability="interval", sync_interval=3).close()
    assert (writer.durability, writer.sync_interval) == ("interval", 3.0)
    registry.acquire(path, durability="interval", sync_interval=7).close()
    assert (writer.durability, writer.sync_interval) == ("interval", 3.0)
    registry.acquire(path, durability="publish").close()
    registry.acquire(path, durability="close").close()
    assert (writer.durability, writer.sync_interval) == ("publish", 3.0)
    first.close()


# ---- FileBroker and FilePublisher ------------------------------------------------------------


async def test_a_file_broker_with_durability_publish_returns_each_publish_once_synced(
    tmp_path: Path, syncs: Syncs
) -> None:
    path = tmp_path / "f.ss"
    app = App("durable")
    broker = app.broker(FileBroker(path, durability="publish"))
    async with serving(app):
        for n in range(1, 4):
            await broker.publish("k", n)
            assert syncs.count == n and syncs.sizes[-1] == path.stat().st_size
    assert syncs.count == 3


async def test_a_file_broker_with_durability_interval_syncs_in_the_background_until_it_stops(
    tmp_path: Path, syncs: Syncs, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "f.ss"
    app = App("interval")
    broker = app.broker(FileBroker(path, durability="interval", sync_interval=2))
    async with serving(app):
        await broker.publish("k", 1)
        assert syncs.count == 0
        await trio.sleep(60)  # the background sync begins at 2 s
        await broker.publish("k", 2)  # unsynced when the app stops
    assert syncs.count == 2  # the background sync, then the stop's


async def test_a_file_broker_with_durability_close_syncs_only_when_the_app_stops(
    tmp_path: Path, syncs: Syncs, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "f.ss"
    app = App("close")
    broker = app.broker(FileBroker(path, durability="close"))
    async with serving(app):
        for n in range(5):
            await broker.publish("k", n)
            await trio.sleep(10)
        assert syncs.count == 0
    assert syncs.count == 1


async def test_a_file_publisher_with_durability_publish_returns_each_receipt_once_synced(
    tmp_path: Path, syncs: Syncs
) -> None:
    async with FilePublisher(
        tmp_path / "f.ss", durability="publish", registry=WriterRegistry()
    ) as publisher:
        receipt = await publisher.publish("k", {"n": 1})
        assert syncs.count == 1 and receipt.offset < syncs.sizes[0]
        await publisher.publish_many("k", [{"n": 2}, {"n": 3}])
        assert syncs.count == 2


async def test_a_file_publisher_keeps_its_file_synced_within_the_interval_while_asked_to(
    tmp_path: Path, syncs: Syncs, autojump_clock: trio.testing.MockClock
) -> None:
    async with FilePublisher(
        tmp_path / "f.ss", sync_interval=3, registry=WriterRegistry()
    ) as publisher:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(publisher.keep_synced)
            await publisher.publish("k", 1)
            await trio.sleep(3.5)  # the sync begins at 3 s
            nursery.cancel_scope.cancel()  # and ends before keep_synced does
        assert syncs.count == 1


def test_the_cli_publish_prints_its_receipts_after_they_are_synced(
    tmp_path: Path, syncs: Syncs, capsys: pytest.CaptureFixture[str]
) -> None:
    from trio_streams.cli.commands import main

    printed_at_sync: list[str] = []
    syncs.after = lambda: printed_at_sync.append(capsys.readouterr().out)
    assert main(["publish", str(tmp_path / "f.ss"), "k", "hello"]) in (0, None)
    assert printed_at_sync == [""] and capsys.readouterr().out.startswith("k seq:1 ")


# ---- a killed writer ---------------------------------------------------------------------------

_KILLED_WRITER = textwrap.dedent(
    """
    import sys
    from trio_streams.file import durability
    from trio_streams.file.writer import StreamWriter

    synced = []
    real = durability._sync
    durability._sync = lambda fd: (real(fd), synced.append(fd))
    writer = StreamWriter(sys.argv[1], durability="publish")
    for n in range(1, 1000):
        receipt = writer.publish("k", b"message %d" % n)
        print(receipt.seq, receipt.offset, len(synced), flush=True)
        if n == int(sys.argv[2]):
            sys.stdin.readline()  # killed here, the receipt given, the writer still open
    """
)


@pytest.mark.parametrize("killed_after", [1, 7])
def test_a_writer_killed_right_after_a_receipt_with_durability_publish_left_every_receipted_message(
    tmp_path: Path, killed_after: int
) -> None:
    """SIGKILL right after a receipt; reopening the file finds every receipted message.

    A killed process loses nothing the kernel holds, so this checks the receipt came after the
    write and its sync (the child counts its syncs); a power loss itself cannot be tested here."""
    path = tmp_path / "f.ss"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILLED_WRITER, str(path), str(killed_after)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        cwd=ROOT,
        text=True,
    )
    assert child.stdout is not None
    try:
        receipts = [child.stdout.readline().split() for _ in range(killed_after)]
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        child.kill()
        child.communicate()
    assert child.returncode == -signal.SIGKILL
    assert [int(synced) for _, _, synced in receipts] == list(range(1, killed_after + 1))
    found = messages(path)
    assert found == [("k", n, b"message %d" % n) for n in range(1, killed_after + 1)]
    with StreamWriter(path, durability="publish") as writer:  # the file continues
        assert writer.publish("k", b"after").seq == killed_after + 1
