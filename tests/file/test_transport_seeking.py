"""Seeking on stream files where the file has more to say than the Seeking contract: instants
carried by deliveries, milliseconds converted without loss, and file/in-process parity.

The Seeking contract itself is stated once for every transport in
``trio_streams/testing/conformance/seeking.py``. Files hold messages whose payload is their sequence
number, so ``seen`` lists read like positions.
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import trio

from tests.support import serving
from trio_streams import App, Context, SeekRefused
from trio_streams.file import FileBroker, FilePosition, FileStream

from .apps import file_app, replay_app, replay_with_seeks, run_to_end, write_at_instants

# ---- "timestamp(ms) — the first message strictly later; milliseconds in the API, converted
# without loss" (what the file adds: every delivery carries the instant it was written at).


async def test_deliveries_carry_their_instant_for_timestamp_seeks(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    write_at_instants(path, [1_000, 2_000, 3_000, 4_000])
    seen: list[tuple[int, int | None]] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.timestamp_ms))
        if n == 4 and len(seen) == 4:
            assert seen[1][1] is not None
            await ctx.seeker.seek(FilePosition.timestamp(seen[1][1]))  # after message 2

    await run_to_end(replay_app(path, handle)[0])
    assert seen == [(1, 1_000), (2, 2_000), (3, 3_000), (4, 4_000), (3, 3_000), (4, 4_000)]


async def test_milliseconds_in_the_api_are_converted_without_loss(tmp_path: Path) -> None:
    path = tmp_path / "s.ss"
    base = 1_700_000_000_000
    write_at_instants(path, [base + k for k in range(10)])  # one millisecond apart
    instant = dt.datetime.fromtimestamp(base / 1000, dt.UTC) + dt.timedelta(milliseconds=6)
    assert FilePosition.after(instant) == FilePosition.timestamp(base + 6)
    seeks = {(10, 1): FilePosition.after(instant)}  # message 7 is at base+6: 8 is later
    assert await replay_with_seeks(path, seeks) == [*range(1, 11), 8, 9, 10]


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
