"""End-of-stream messages: one meaning for replay, live and the reader, and no spinning at one.

The meaning (FORMAT.md, "trio-streams decisions"): an EOS that stays in the file ends the stream
for every reader — a replay ends there, a live subscription ends there, ``file decode`` stops
there — as upstream's readers do. An EOS at the tip is waited at by a live reader, not read
through: a writer that reopens the file overwrites it, and the reader goes on with what replaced
it. Waiting there costs what waiting anywhere costs: the 1 ms → 1024 ms polling timeout.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import Context
from trio_streams.file import FilePosition, FileStream
from trio_streams.file.follower import MAX_BACKOFF_MS, FileSource
from trio_streams.file.reader import FileReader
from trio_streams.file.watch import WatchRegistry
from trio_streams.file.writer import StreamWriter

from .apps import file_app, run_to_end, write_numbers
from .conftest import VECTORS

MID_FILE_EOS = VECTORS / "eos-mid-file-short.ss"


def _numbers_then_eos(path: Path, count: int, *, beacon_interval: int = 1024) -> None:
    with StreamWriter(path, beacon_interval=beacon_interval) as writer:
        for n in range(1, count + 1):
            writer.append("s", str(n).encode())
        writer.close(eos=True)


def _append_numbers(path: Path, first: int, count: int) -> None:
    """Reopen the file as a new writer would (overwriting a trailing EOS) and append."""
    with StreamWriter(path) as writer:
        for n in range(first, first + count):
            writer.append("s", str(n).encode())


# ---- A. "An idle live subscription parked before a trailing EOS" must not burn a core: "read to
# the end, then wait (1 ms doubling to 1024 ms, reset by a burst)".


@pytest.mark.parametrize("inotify", [True, False], ids=["inotify", "polling"])
async def test_a_live_source_parked_before_a_trailing_eos_waits_with_the_doubling_timeout(
    tmp_path: Path, autojump_clock: trio.abc.Clock, inotify: bool
) -> None:
    path = tmp_path / "s.ss"
    _numbers_then_eos(path, 1)
    registry = WatchRegistry(inotify=inotify)
    async with await FileSource.open(path, mode="live", registry=registry) as source:
        wakes = 0
        start = trio.current_time()
        while trio.current_time() - start < 60 and wakes < 10_000:
            assert source.read_available() == []
            await source.wait()
            wakes += 1
        assert not source.ended
    # 1+2+...+512 ms is ~1 s for ten wakes, then one wake per 1024 ms: ~70 in a minute.
    assert wakes <= 11 + 60, f"{wakes} wake-ups in 60 s of idling before an EOS"
    assert source.backoff_ms == MAX_BACKOFF_MS


async def test_the_backoff_before_a_trailing_eos_resets_when_a_writer_resumes(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "s.ss"
    _numbers_then_eos(path, 3)
    async with await FileSource.open(
        path, mode="live", registry=WatchRegistry(inotify=False)
    ) as source:
        for _ in range(12):
            assert source.read_available() == []
            await source.wait()
        assert source.backoff_ms == MAX_BACKOFF_MS
        _append_numbers(path, 4, 2)
        await source.wait()
        got = source.read_available()
        assert [m.payload for m in got] == [b"4", b"5"]
        assert source.backoff_ms == 1


async def test_an_idle_live_app_parked_before_a_trailing_eos_uses_almost_no_cpu(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    _numbers_then_eos(path, 1)
    app, broker = file_app(path, existing_only=True)
    seen: list[int] = []

    @broker.subscriber(FileStream("s"))
    async def handle(n: int) -> None:
        seen.append(n)

    async with serving(app):
        await trio.sleep(0.2)  # past the first, fast polls
        cpu = time.process_time()
        wall = time.perf_counter()
        await trio.sleep(1.0)  # the window measured, not a synchronisation
        used = time.process_time() - cpu
        elapsed = time.perf_counter() - wall
    assert seen == []
    # A spinning follower uses a whole core (~1 s of CPU per second); an idle one, almost none.
    assert used < 0.25 * elapsed, f"{used:.3f} s of CPU in {elapsed:.3f} s while idle"


# ---- B. "A live reader that meets an EOS inside a buffered read" reads past it once a writer
# reopens the file: "live subscriptions continue past an EOS" that a writer overwrote.


@pytest.mark.parametrize("count", [1, 7, 64, 1000])
async def test_a_live_subscription_from_the_beginning_continues_past_an_overwritten_eos(
    tmp_path: Path, count: int
) -> None:
    path = tmp_path / "s.ss"
    _numbers_then_eos(path, 100)
    app, broker = file_app(path, existing_only=True)
    seen: list[int] = []
    first_hundred = trio.Event()
    all_done = trio.Event()

    @broker.subscriber(FileStream("s", start_at=FilePosition.beginning()), count=count)
    async def handle(n: int) -> None:
        seen.append(n)
        if n == 100:
            first_hundred.set()
        if n == 103:
            all_done.set()

    async with serving(app):
        with trio.fail_after(20):
            await first_hundred.wait()
            _append_numbers(path, 101, 3)
            await all_done.wait()
    assert seen == list(range(1, 104))


@pytest.mark.parametrize("count", [1, 10, 64])
async def test_an_eos_overwritten_while_the_reader_still_holds_it_in_a_read_is_read_past(
    tmp_path: Path, count: int
) -> None:
    """The reader read the EOS with the messages before it; a writer overwrites it before the
    reader reaches it. The reader must read what replaced it, not the stale bytes it holds."""
    path = tmp_path / "s.ss"
    _numbers_then_eos(path, 100)
    app, broker = file_app(path, existing_only=True)
    seen: list[int] = []
    at_30 = trio.Event()
    go_on = trio.Event()
    done = trio.Event()

    @broker.subscriber(FileStream("s", start_at=FilePosition.beginning()), count=count)
    async def handle(n: int) -> None:
        seen.append(n)
        if n == 30:
            at_30.set()
            await go_on.wait()
        if n == 103:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await at_30.wait()
            _append_numbers(path, 101, 3)  # longer than the EOS it overwrites
            go_on.set()
            await done.wait()
    assert seen == list(range(1, 104))


async def test_a_source_holding_an_overwritten_eos_in_its_buffer_reads_past_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    _numbers_then_eos(path, 100)
    async with await FileSource.open(path, mode="live", keys={"s"}) as source:
        await source.seek(FilePosition.beginning())
        got = source.read_available(10)  # the first chunk read holds every message and the EOS
        _append_numbers(path, 101, 2)
        with trio.fail_after(10):
            while len(got) < 102:
                batch = source.read_available(10)
                got += batch
                if not batch:
                    assert not source.ended
                    await source.wait()
    assert [m.payload for m in got] == [str(n).encode() for n in range(1, 103)]


async def test_a_live_seek_back_over_a_trailing_eos_continues_past_it_when_overwritten(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    _numbers_then_eos(path, 100)
    app, broker = file_app(path, existing_only=True)
    seen: list[int] = []
    back_at_tip = trio.Event()
    done = trio.Event()

    @broker.subscriber(FileStream("s"))
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 101 and seen.count(101) == 1:
            await ctx.seeker.seek(FilePosition.beginning())
        elif n == 101:
            back_at_tip.set()
        elif n == 102:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            with StreamWriter(path) as writer:
                writer.append("s", b"101")
                writer.close(eos=True)
            await back_at_tip.wait()
            _append_numbers(path, 102, 1)
            await done.wait()
    assert seen == [101, *range(1, 102), 102]


# ---- K. "Decide one meaning of an EOS for replay, live and decode ... and make all three agree."


def _payloads_of_reader(path: Path) -> list[bytes]:
    with FileReader(path) as reader:
        return [m.payload for m in reader]


async def _delivered(path: Path, stream: FileStream) -> list[bytes]:
    app, broker = file_app(path, existing_only=True)
    seen: list[bytes] = []

    @broker.subscriber(stream)
    async def handle(payload: bytes) -> None:
        seen.append(payload)

    await run_to_end(app)
    return seen


async def test_an_eos_that_stays_in_the_file_ends_replay_live_and_the_reader_alike() -> None:
    from_reader = _payloads_of_reader(MID_FILE_EOS)
    replayed = await _delivered(MID_FILE_EOS, FileStream("a").replay())
    # A live subscription from the beginning ends at the EOS too: the app stops by itself.
    followed = await _delivered(MID_FILE_EOS, FileStream("a", start_at=FilePosition.beginning()))
    assert len(from_reader) == 100
    assert replayed == from_reader
    assert followed == from_reader


async def test_a_live_reader_waiting_at_a_trailing_eos_ends_when_a_write_leaves_it_in_place(
    tmp_path: Path,
) -> None:
    """An EOS followed by more frames (an upstream writer appending to a short file keeps it)
    stays in the file, so the stream ended there; a live reader parked before it ends too."""
    path = tmp_path / "s.ss"
    write_numbers(path, 2, key="s")
    with StreamWriter(path) as writer:
        writer.write_eos(1_700_000_000_000)
        writer.flush()
        app, broker = file_app(path, existing_only=True)
        seen: list[int] = []

        @broker.subscriber(FileStream("s", start_at=FilePosition.beginning()))
        async def handle(n: int) -> None:
            seen.append(n)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                running = await nursery.start(app.serve)
                writer.append("s", b"3")  # after the EOS, which stays
                writer.flush()
                await running.wait_stopped()  # the subscription ended, so the app stopped
    assert seen == [1, 2]


async def test_a_live_subscription_starting_after_a_mid_file_eos_follows_the_tip(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    path.write_bytes(MID_FILE_EOS.read_bytes())
    with FileReader(path, start=FilePosition.end()) as reader:
        tip = reader.offset
    assert tip == path.stat().st_size  # the scan for the tip steps over the mid-file EOS
    app, broker = file_app(path, existing_only=True)
    seen: list[bytes] = []
    got = trio.Event()

    @broker.subscriber(FileStream("a"))
    async def handle(payload: bytes) -> None:
        seen.append(payload)
        got.set()

    async with serving(app) as running:
        with trio.fail_after(20):
            await running.publish(broker, "a", b"new")
            await got.wait()
    assert seen == [b"new"]


async def test_a_seek_past_a_mid_file_eos_lands_there_and_reads_what_follows() -> None:
    """A position after the marker is where the seek lands; reading goes on from there."""
    seen: list[int] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        assert ctx.position is not None and ctx.position.value is not None
        seen.append(ctx.position.value)
        if len(seen) == 10:
            await ctx.seeker.seek(FilePosition.sequence(150))

    app, broker = file_app(MID_FILE_EOS, existing_only=True)
    broker.subscriber(FileStream("a").replay())(handle)
    await run_to_end(app)
    with FileReader(MID_FILE_EOS, on_eos="include", internal=True) as reader:
        after = [m.seq for m in reader if not m.is_eos][100:]
    assert after[0] < 150 <= after[-1]
    assert seen[10:] == [s for s in after if s >= 150]
