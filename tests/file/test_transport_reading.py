"""The "Reading a stream file" contract through the framework: one test per sentence."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import AppFailed, Context, RunningApp, SeekRefused, retry
from trio_streams.file import FilePosition, FileRemovedError, FileStream
from trio_streams.file import broker as broker_module
from trio_streams.file.watch import WatchRegistry, watches
from trio_streams.file.writer import StreamWriter

from .apps import file_app, replay_app, replay_with_seeks, run_to_end, write_numbers
from .conftest import VECTORS, Vector, as_tuple

# ---- "A source task reads the file to its end, then waits for the OS to report a change; because
# the OS may report late, the wait also times out: 1 ms at first, doubling to 1024 ms while the
# file stays quiet; a burst of writes resets it."


async def test_a_live_subscription_reads_to_the_end_then_wakes_on_the_os_report_of_a_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)  # before the subscription starts: not delivered
    code = textwrap.dedent(
        f"""
        import sys
        from trio_streams.file.writer import StreamWriter
        with StreamWriter({str(path)!r}) as writer:
            for n in range(4, 204):
                writer.append("s", str(n).encode())
                writer.flush()
        """
    )
    app, broker = file_app(path, existing_only=True, name="live")
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(FileStream("s"))
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 200:
            done.set()

    async with serving(app):
        with trio.fail_after(30):
            process = await trio.lowlevel.open_process([sys.executable, "-c", code])
            try:
                await done.wait()
            finally:
                assert await process.wait() == 0
    assert seen == list(range(4, 204))


async def test_when_the_os_reports_nothing_the_wait_times_out_from_1_ms_doubling_to_1024_ms(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, autojump_clock: trio.abc.Clock
) -> None:
    # No OS events at all: only the timeouts notice writes.
    monkeypatch.setattr(broker_module, "watches", WatchRegistry(inotify=False))
    path = tmp_path / "s.ss"
    app, broker = file_app(path, name="poll")
    handled: list[tuple[int, float]] = []
    arrived = trio.Event()

    @broker.subscriber(FileStream("s"))
    async def handle(n: int) -> None:
        handled.append((n, trio.current_time()))
        arrived.set()

    async def publish_and_wait(n: int) -> float:
        nonlocal arrived
        arrived = trio.Event()
        sent = trio.current_time()
        await broker.publish("s", n)
        await arrived.wait()
        return handled[-1][1] - sent

    async with serving(app):
        await trio.sleep(60)  # quiet: the timeout has doubled to its cap
        after_quiet = await publish_and_wait(1)
        # The write reset it: the next write is noticed within the first 1 ms timeout.
        right_after = await publish_and_wait(2)
        await trio.sleep(0.1)  # 1+2+4+...+64 ms: the next wait is 128 ms
        after_short_quiet = await publish_and_wait(3)
    assert 0 < after_quiet <= 1.024
    assert right_after <= 0.001
    assert 0.001 < after_short_quiet <= 0.128


async def test_one_watcher_serves_each_file_in_a_process_however_many_readers_it_has(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    app, broker = file_app(path, name="many")
    for n, stream in enumerate(
        [FileStream("s"), FileStream("s"), FileStream("s", "t"), FileStream("s").replay()]
    ):
        broker.subscriber(stream, name=f"reader{n}")(_noop)
    before = len(watches)
    async with serving(app):
        assert len(watches) == before + 1
    assert len(watches) == before


async def _noop(n: int) -> None:
    pass


async def test_a_file_removed_under_a_live_subscription_fails_the_app_naming_the_path(
    tmp_path: Path,
) -> None:
    path = tmp_path / "gone.ss"
    app, broker = file_app(path, name="removed")
    seen: list[int] = []
    first = trio.Event()

    @broker.subscriber(FileStream("s"), name="live")
    async def handle(n: int) -> None:
        seen.append(n)
        first.set()

    failures: list[BaseException] = []
    with trio.fail_after(30):
        try:
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await broker.publish("s", 1)
                await first.wait()
                os.remove(path)
                await running.wait_stopped()
        except* AppFailed as group:
            failures.extend(group.exceptions)
    assert seen == [1]
    [failure] = failures
    assert "subscription 'live' failed" in str(failure)
    assert isinstance(failure.__cause__, FileRemovedError)
    assert failure.__cause__.path == str(path)
    assert "removed from disk" in str(failure.__cause__)


# ---- "Above it, a message source reassembles frames, steps over beacons and joins a message a
# beacon split; a consumer keeps the messages of its stream keys and hands them out one per
# call."


@pytest.mark.parametrize(
    ("name", "keys"),
    [("three-keys-2048", ("orders", "audit.log")), ("big-frames-1024", ("blob",))],
)
async def test_a_replay_joins_frames_split_by_beacons_and_keeps_only_its_stream_keys(
    name: str, keys: tuple[str, ...], copy_vector: Any
) -> None:
    vector = Vector(name, VECTORS / f"{name}.ss", 0, True)
    path = copy_vector(vector.path)
    expected = [(row[0], row[2], row[4]) for row in map(as_tuple, vector.rows()) if row[0] in keys]
    got: list[tuple[str, int, bytes]] = []
    calls: list[int] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        assert ctx.position is not None and ctx.position.value is not None
        got.append((ctx.stream, ctx.position.value, payload))
        calls.append(1)  # one message per call

    app, broker = file_app(path, existing_only=True, name="vector")
    broker.subscriber(FileStream(*keys).replay())(handle)
    await run_to_end(app)
    assert got == expected
    assert len(calls) == len(expected) > 20


# ---- "A live subscription starts at the tip and waits for the next write. A replay reads from
# the beginning and ends after the last message (or at EOS) — it never reports the end while
# messages are still undelivered."


async def test_a_live_subscription_starts_at_the_tip_and_waits_for_the_next_write(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 5)
    app, broker = file_app(path, name="live")
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(FileStream("s"))
    async def handle(n: int) -> None:
        seen.append(n)
        if n == 7:
            done.set()

    async with serving(app):
        await broker.publish("s", 6)
        await broker.publish("s", 7)
        with trio.fail_after(10):
            await done.wait()
    assert seen == [6, 7]


async def test_a_replay_reads_from_the_beginning_and_ends_after_the_last_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 50)
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)

    await run_to_end(replay_app(path, handle)[0])  # the app stops by itself
    assert seen == list(range(1, 51))


async def test_a_replay_ends_at_an_end_of_stream_message(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    with StreamWriter(path, beacon_interval=1024) as writer:
        for n in range(1, 4):
            writer.append("s", str(n).encode())
        writer.write_eos()
        writer.append("s", b"4")  # after the end of the stream: not replayed
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)

    await run_to_end(replay_app(path, handle)[0])
    assert seen == [1, 2, 3]


async def test_a_replay_never_reports_the_end_while_messages_are_still_undelivered(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 40)
    seen: list[tuple[int, int]] = []

    async def handle(n: int, ctx: Context) -> Any:
        # Slow: wait until the driver is blocked too (channel full, or the file read to its end).
        await trio.testing.wait_all_tasks_blocked()
        seen.append((n, ctx.attempt))
        if n in (1, 40) and ctx.attempt == 1:
            return retry()  # copies appended after the replay read its end: delivered too
        return None

    await run_to_end(replay_app(path, handle, buffer=2, count=64)[0])
    assert [n for n, _ in seen[:40]] == list(range(1, 41))
    assert sorted(seen[40:]) == [(1, 2), (40, 2)]


# ---- "Seek to beginning/end moves straight there; to a sequence or an instant it surveys the
# beacons for the region that holds it, rewinds to that beacon, and reads forward. Reading past
# the end refuses the seek, and the source goes back to where it was."


async def test_a_seek_to_a_sequence_or_an_instant_deep_in_a_file_of_many_beacons_lands_on_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    base = 1_700_000_000_000
    with StreamWriter(path, beacon_interval=1024) as writer:
        for n in range(1, 3001):
            writer.append("s", str(n).encode(), timestamp_ms=base + n)
            writer.append("noise", b"x" * 40, timestamp_ms=base + n)
    assert path.stat().st_size > 200 * 1024
    seeks = {
        (3, 1): FilePosition.sequence(2_718),
        (2_720, 1): FilePosition.timestamp(base + 1_414),  # strictly later
        (1_417, 1): FilePosition.end(),
    }
    seen = await replay_with_seeks(path, seeks)
    assert seen == [1, 2, 3, 2_718, 2_719, 2_720, 1_415, 1_416, 1_417]


async def test_reading_past_the_end_refuses_the_seek_and_the_source_goes_back_where_it_was(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 600)  # several beacons at 1024 bytes
    seen: list[int] = []
    refusals: list[str] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 300:
            with pytest.raises(SeekRefused) as refused:
                await ctx.seeker.seek(FilePosition.timestamp(253_402_300_799_999))
            refusals.append(str(refused.value))

    await run_to_end(replay_app(path, handle, buffer=1, count=1)[0])
    assert seen == list(range(1, 601))
    assert "no message of stream 's' is later than 253402300799999 ms" in refusals[0]


# ---- "Nothing in the file records how far a reader got: a service that restarts resumes from a
# position it stored itself (the API makes storing and resuming one line each)."


async def test_nothing_in_the_file_records_how_far_a_reader_got(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 20)
    before = path.read_bytes()

    async def handle(n: int, ctx: Context) -> None:
        pass

    durable = FileStream("s", durable="reader").replay()
    await run_to_end(replay_app(path, handle, stream=durable)[0])
    assert path.read_bytes() == before
    assert (tmp_path / "s.ss.consumers" / "reader.json").exists()


async def test_a_service_that_restarts_resumes_from_a_position_it_stored_itself(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 5)
    stored: list[FilePosition] = []
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        assert ctx.position is not None
        stored[:] = [ctx.position]  # storing: one line

    await run_to_end(replay_app(path, handle)[0])
    write_numbers(path, 5, first=6)  # the file grew while the service was down

    resumed = FileStream("s", start_at=stored[0]).replay()  # resuming: one line
    await run_to_end(replay_app(path, handle, stream=resumed)[0])
    assert seen == [1, 2, 3, 4, 5, 5, 6, 7, 8, 9, 10]  # inclusive: the stored message again
