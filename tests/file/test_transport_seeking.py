"""The Seeking contract on stream files: one test per sentence of the contract, real files.

Files hold messages whose payload is their sequence number, so ``seen`` lists read like
positions.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import App, Context, InvalidPosition, RunningApp, SeekRefused
from trio_streams.file import FileBroker, FilePosition, FileStream
from trio_streams.file.writer import StreamWriter
from trio_streams.positions import MAX_SEQUENCE, MAX_TIMESTAMP_MS
from trio_streams.subscription import SubscriptionStats

from .apps import Watch, file_app, replay_app, replay_with_seeks, run_to_end, write_numbers

# ---- "ctx.seeker.seek(position) sends a command to the subscription's driver; the driver runs
# the client's seek to completion, outside any race with the next read, and answers when done."


async def test_the_driver_runs_a_seek_to_completion_outside_any_race_with_the_next_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 5)
    app, broker = file_app(path, name="seek")
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(FileStream("s"), name="live")
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 6 and seen.count(6) == 1:
            # The driver is waiting for the file to grow: the seek wakes it, runs, answers.
            await ctx.seeker.seek(FilePosition.sequence(2))
        if len(seen) == 6:
            done.set()

    async with serving(app):
        await broker.publish("s", 6)
        with trio.fail_after(10):
            await done.wait()
    assert seen == [6, 2, 3, 4, 5, 6]


# ---- "Positions: beginning, end (the tip), sequence(n) — inclusive, so seeking to a position
# read off a delivery delivers that message again — and timestamp(ms) — the first message
# strictly later; milliseconds in the API, converted without loss; an out-of-range value is
# refused before the client sees it."


async def test_seeking_to_the_beginning_and_to_the_end_the_tip(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 6)
    seeks = {(4, 1): FilePosition.beginning(), (2, 2): FilePosition.end()}
    assert await replay_with_seeks(path, seeks) == [1, 2, 3, 4, 1, 2]


async def test_seek_to_a_captured_position_redelivers_exactly_that_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 8)
    seen: list[int] = []
    captured: list[FilePosition] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 3 and not captured:
            assert ctx.position is not None
            captured.append(ctx.position)
        if n == 7 and seen.count(7) == 1:
            await ctx.seeker.seek(captured[0])

    await run_to_end(replay_app(path, handle)[0])
    assert captured == [FilePosition.sequence(3, stream="s")]
    assert seen == [1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 8]


def _write_at_instants(path: Path, instants: list[int]) -> None:
    with StreamWriter(path, beacon_interval=1024) as writer:
        for n, ms in enumerate(instants, 1):
            writer.append("s", str(n).encode(), timestamp_ms=ms)


async def test_deliveries_carry_their_instant_for_timestamp_seeks(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    _write_at_instants(path, [1_000, 2_000, 3_000, 4_000])
    seen: list[tuple[int, int | None]] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.timestamp_ms))
        if n == 4 and len(seen) == 4:
            assert seen[1][1] is not None
            await ctx.seeker.seek(FilePosition.timestamp(seen[1][1]))  # after message 2

    await run_to_end(replay_app(path, handle)[0])
    assert seen == [(1, 1_000), (2, 2_000), (3, 3_000), (4, 4_000), (3, 3_000), (4, 4_000)]


async def test_a_timestamp_seek_lands_on_the_first_message_strictly_later(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    # Several messages share an instant: "strictly later" skips all of them.
    _write_at_instants(path, [1_000, 2_000, 2_000, 2_000, 3_000, 4_000])
    seeks = {(6, 1): FilePosition.timestamp(2_000)}
    assert await replay_with_seeks(path, seeks) == [1, 2, 3, 4, 5, 6, 5, 6]


async def test_milliseconds_in_the_api_are_converted_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    base = 1_700_000_000_000
    _write_at_instants(path, [base + k for k in range(10)])  # one millisecond apart
    instant = dt.datetime.fromtimestamp(base / 1000, dt.UTC) + dt.timedelta(milliseconds=6)
    assert FilePosition.after(instant) == FilePosition.timestamp(base + 6)
    seeks = {(10, 1): FilePosition.after(instant)}  # message 7 is at base+6: 8 is later
    assert await replay_with_seeks(path, seeks) == [*range(1, 11), 8, 9, 10]


async def test_an_out_of_range_value_is_refused_before_the_client_sees_it(tmp_path: Path) -> None:
    builders: list[Callable[[], FilePosition]] = [
        lambda: FilePosition.sequence(MAX_SEQUENCE + 1),
        lambda: FilePosition.sequence(-1),
        lambda: FilePosition.timestamp(MAX_TIMESTAMP_MS + 1),
        lambda: FilePosition.after(dt.datetime(2024, 1, 1, 0, 0, 0, 1, tzinfo=dt.UTC)),
    ]
    for build in builders:
        with pytest.raises(InvalidPosition):
            build()
    path = tmp_path / "s.ss"
    write_numbers(path, 2)
    errors: list[BaseException] = []

    async def handle(n: int, ctx: Context) -> None:
        try:
            await ctx.seeker.seek(n)  # type: ignore[arg-type]
        except TypeError as exc:
            errors.append(exc)

    await run_to_end(replay_app(path, handle)[0])
    assert len(errors) == 2 and "takes a Position" in str(errors[0])


# ---- "A seek that moved the reader opens a new generation, published before seek returns;
# every queued delivery of an older generation is dropped, so nothing read at the old position
# reaches the handler after seek returns."


async def test_a_seek_that_moved_the_reader_opens_a_new_generation_before_it_returns(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 10)
    generations: list[tuple[int, int]] = []

    async def handle(n: int, ctx: Context) -> None:
        if n == 2 and not generations:
            before = ctx.seeker.generation
            await ctx.seeker.seek(FilePosition.sequence(9))
            generations.append((before, ctx.seeker.generation))

    await run_to_end(replay_app(path, handle)[0])
    assert generations == [(0, 1)]


async def test_every_queued_delivery_of_an_older_generation_is_dropped(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 60)
    seen: list[int] = []
    stale: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 10:
            await ctx.seeker.seek(FilePosition.sequence(50))

    app, _ = replay_app(path, handle, buffer=8, count=8)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            await running.wait_finished()
            stale.append(running.stats()["sub"].stale)
    assert seen == [*range(1, 11), *range(50, 61)]
    assert stale[0] > 0  # the channel held 11.. and they were purged unhandled


async def test_nothing_read_at_the_old_position_reaches_a_handler_after_seek_returns(
    tmp_path: Path, autojump_clock: trio.abc.Clock
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 120)
    seeked = False
    started: list[tuple[bool, int]] = []

    async def handle(n: int, ctx: Context) -> None:
        nonlocal seeked
        started.append((seeked, n))
        await trio.sleep(0.01 * (n % 3))
        if n == 20 and not seeked:
            await ctx.seeker.seek(FilePosition.sequence(100))
            seeked = True  # no checkpoint between the seek returning and this

    await run_to_end(replay_app(path, handle, workers=4, buffer=16, count=16)[0])
    after = [n for was_seeked, n in started if was_seeked]
    assert sorted(after) == list(range(100, 121))


# ---- "A refused seek (e.g. a sequence past the next one the file will write) leaves a replay
# where it was, with what it had read still queued; a live subscription ends instead."


async def test_a_refused_seek_keeps_a_replay_where_it_was_with_what_it_had_read_still_queued(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 10)
    seen: list[int] = []
    refusals: list[str] = []
    stats: list[SubscriptionStats] = []
    watch = Watch()

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 3:
            running = await watch.running()
            stats.append(running.stats()["sub"])
            with pytest.raises(SeekRefused) as refused:
                await ctx.seeker.seek(FilePosition.sequence(500))  # the next one is 11
            refusals.append(str(refused.value))
            stats.append(running.stats()["sub"])

    await watch.run_to_end(replay_app(path, handle, buffer=4, count=4)[0])
    assert seen == list(range(1, 11))
    assert stats[0].queued > 0  # deliveries 4.. were queued when the seek was refused
    assert [(s.generation, s.stale) for s in stats] == [(0, 0), (0, 0)]  # and none was dropped
    assert str(path) in refusals[0]
    assert "seq:500" in refusals[0] and "stream 's'" in refusals[0]
    assert "past the last sequence 10" in refusals[0]


async def test_seeking_to_the_next_sequence_the_file_will_write_is_allowed(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 5)
    seeks = {(2, 1): FilePosition.sequence(6)}  # the tip: nothing more to replay
    assert await replay_with_seeks(path, seeks) == [1, 2]


async def test_a_refused_seek_ends_a_live_subscription(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    app, broker = file_app(path, name="seek")
    seen: list[int] = []

    @broker.subscriber(FileStream("s"), name="live")
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        with pytest.raises(SeekRefused, match="no message of stream 's' is later than"):
            await ctx.seeker.seek(FilePosition.timestamp(MAX_TIMESTAMP_MS))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            await broker.publish("s", 1)
            await running.wait_finished()
            assert running.subscriptions["live"].value == "ended"
            await broker.publish("s", 2)  # nobody reads it any more
            await running.wait_stopped()  # every subscription ended: the app stops by itself
    assert seen == [1]


# ---- "A replay that reached the end of the file can still seek, and delivers again from the
# new position."


async def test_a_replay_that_reached_the_end_can_still_seek_and_delivers_again_from_there(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 5)
    # Each time message 5 is handled the replay has read everything and reported its end: this
    # handler is the last one in flight.
    seeks = {(5, 1): FilePosition.sequence(4), (5, 2): FilePosition.beginning()}
    seen = await replay_with_seeks(path, seeks, count=64, buffer=64)
    assert seen == [1, 2, 3, 4, 5, 4, 5, 1, 2, 3, 4, 5]


# ---- "Seeks are served while the delivery channel is full: the handler waiting on a seek may be
# the one that stopped draining."


async def test_seeks_are_served_while_the_channel_is_full_and_its_handler_is_the_one_waiting(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 32)
    seen: list[int] = []
    before_seek: list[tuple[int, int]] = []
    watch = Watch()

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 1:
            running = await watch.running()
            # buffer=1 and count=4: the driver blocks sending into the full channel, and this
            # handler, the only worker, is the one that stopped draining it.
            await trio.testing.wait_all_tasks_blocked()
            stats = running.stats()["sub"]
            before_seek.append((stats.queued, stats.held))
            await ctx.seeker.seek(FilePosition.sequence(30))

    await watch.run_to_end(replay_app(path, handle, buffer=1, count=4)[0])
    assert before_seek == [(1, 2)]  # channel full (1 of 1), two more read and held
    assert seen == [1, 30, 31, 32]


# ---- "After shutdown, every seek is refused."


async def test_after_shutdown_every_seek_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    seekers = []

    async def handle(n: int, ctx: Context) -> None:
        seekers.append(ctx.seeker)

    await run_to_end(replay_app(path, handle)[0])
    for position in (FilePosition.beginning(), FilePosition.sequence(1), FilePosition.end()):
        with pytest.raises(SeekRefused, match="has stopped"):
            await seekers[0].seek(position)


# ---- "The in-process transport seeks the same way, with the same refusals, inside the
# subscription's own poll."


def _seeking_app(path: Path) -> tuple[App, FileBroker, list[int], list[str], trio.Event]:
    """A live subscription that seeks back to a captured position, then asks for one past the
    next sequence, which ends it."""
    app, broker = file_app(path, name="same")
    seen: list[int] = []
    refusals: list[str] = []
    done = trio.Event()
    captured: list[FilePosition] = []

    @broker.subscriber(FileStream("s"), name="live")
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 2 and ctx.position is not None and not captured:
            captured.append(ctx.position)
        if n == 5 and seen.count(5) == 1:
            await ctx.seeker.seek(captured[0])
        if n == 6:
            try:
                await ctx.seeker.seek(FilePosition.sequence(100))
            except SeekRefused as refused:
                refusals.append(type(refused).__name__)
            done.set()

    return app, broker, seen, refusals, done


async def test_the_in_process_transport_seeks_the_same_way_with_the_same_refusals(
    tmp_path: Path,
) -> None:
    app, broker, on_file, file_refusals, done = _seeking_app(tmp_path / "s.ss")
    async with serving(app) as running:
        for n in range(1, 7):
            await broker.publish("s", n)
        with trio.fail_after(10):
            await done.wait()
            await running.wait_finished()
        file_state = running.subscriptions["live"]

    app, _, in_process, memory_refusals, _ = _seeking_app(tmp_path / "unused.ss")
    async with app.test() as t:
        for n in range(1, 7):
            await t.publish("s", n)
        with trio.fail_after(10):
            await t.running.wait_finished()
        memory_state = t.running.subscriptions["live"]

    assert on_file == in_process == [1, 2, 3, 4, 5, 2, 3, 4, 5, 6]
    assert file_refusals == memory_refusals == ["SeekRefused"]
    assert file_state.value == memory_state.value == "ended"
    assert not (tmp_path / "unused.ss").exists()  # app.test() touched no file
