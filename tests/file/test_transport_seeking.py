"""Seeking on stream files where the file has more to say than the Seeking contract: instants
carried by deliveries, milliseconds converted without loss, keys that live in a shard other
than 0, durable consumers whose stored position follows a seek, and file/in-process parity.

The Seeking contract itself is stated once for every transport in
``trio_streams/testing/conformance/seeking.py``. Files hold messages whose payload is their
sequence number, so ``seen`` lists read like positions.
"""

from __future__ import annotations

import datetime as dt
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio

from tests.support import serving
from trio_streams import App, ConfigurationError, Context, Position, SeekRefused
from trio_streams.core.positions import MAX_TIMESTAMP_MS
from trio_streams.file import FileBroker, FilePosition, FileStream
from trio_streams.file.writer import StreamWriter

from .apps import (
    Watch,
    file_app,
    replay_app,
    replay_with_seeks,
    run_to_end,
    write_at_instants,
    write_numbers,
)
from .conftest import VECTORS

CONSUMER = VECTORS / "consumer.ss"  # key "hello", shard 1, seq 0..99, then EOS

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


# ---- Through a subscription, on a file whose key lives in shard 1: "A position read off any
# delivery must redeliver it, whatever its shard; refusal messages must state the truth."


async def test_a_position_read_off_a_shard_1_delivery_redelivers_that_message() -> None:
    seen: list[tuple[int, int]] = []
    positions: list[Position] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        assert ctx.position is not None and ctx.position.value is not None
        seen.append((ctx.position.value, ctx.attempt))
        if ctx.position.value == 50 and len(positions) == 0:
            positions.append(ctx.position)
            await ctx.seeker.seek(ctx.position)

    await run_to_end(replay_app(CONSUMER, handle, stream=FileStream("hello").replay())[0])
    assert positions[0] == Position.sequence(50, stream="hello", shard=1)
    assert [seq for seq, _ in seen] == [*range(51), *range(50, 100)]


@pytest.mark.parametrize("target", [0, 1, 37, 99])
async def test_an_unqualified_sequence_seek_finds_the_key_in_its_only_shard(target: int) -> None:
    seen: list[int] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        assert ctx.position is not None and ctx.position.value is not None
        seen.append(ctx.position.value)
        if len(seen) == 60:
            await ctx.seeker.seek(FilePosition.sequence(target))

    await run_to_end(replay_app(CONSUMER, handle, stream=FileStream("hello").replay())[0])
    assert seen == [*range(60), *range(target, 100)]


async def test_timestamp_seeks_work_on_a_shard_1_file() -> None:
    stamps: dict[int, int] = {}
    seen: list[int] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        assert ctx.position is not None and ctx.position.value is not None
        seq = ctx.position.value
        seen.append(seq)
        stamps.setdefault(seq, ctx.timestamp_ms or 0)
        if len(seen) == 80:
            # The first message strictly later than message 30's timestamp.
            await ctx.seeker.seek(FilePosition.timestamp(stamps[30]))

    await run_to_end(replay_app(CONSUMER, handle, stream=FileStream("hello").replay())[0])
    after = [s for s in range(100) if stamps.get(s, 1 << 62) > stamps[30]]
    assert seen[80] == after[0]
    assert seen == [*range(80), *range(after[0], 100)]


async def test_a_refused_seek_on_a_shard_1_file_states_the_real_last_sequence() -> None:
    refusals: list[str] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        assert ctx.position is not None
        if ctx.position.value == 10 and not refusals:
            try:
                await ctx.seeker.seek(FilePosition.sequence(150))
            except SeekRefused as exc:
                refusals.append(str(exc))

    await run_to_end(replay_app(CONSUMER, handle, stream=FileStream("hello").replay())[0])
    assert len(refusals) == 1
    assert "99" in refusals[0], refusals[0]
    assert "last sequence 0" not in refusals[0]


async def test_a_seek_to_a_shard_the_key_has_no_messages_in_is_refused_saying_so() -> None:
    refusals: list[str] = []

    async def handle(payload: bytes, ctx: Context) -> None:
        if not refusals:
            try:
                await ctx.seeker.seek(FilePosition.sequence(5, shard=0))
            except SeekRefused as exc:
                refusals.append(str(exc))

    await run_to_end(replay_app(CONSUMER, handle, stream=FileStream("hello").replay())[0])
    assert "shard 0" in refusals[0] and "shard 1" in refusals[0], refusals[0]


async def test_a_durable_consumer_of_a_shard_1_file_resumes_after_the_stored_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "consumer.ss"
    shutil.copyfile(CONSUMER, path)
    seen: list[int] = []
    watch = Watch()

    async def handle(payload: bytes, ctx: Context) -> None:
        assert ctx.position is not None and ctx.position.value is not None
        seen.append(ctx.position.value)
        if len(seen) == 30:
            (await watch.running()).request_stop()

    stream = FileStream("hello", durable="d").replay()
    await watch.run_to_end(replay_app(path, handle, stream=stream, count=1, buffer=1)[0])
    stored = json.loads((tmp_path / "consumer.ss.consumers" / "d.json").read_text())
    assert stored["shard"] == 1
    first = list(seen)
    seen.clear()
    await run_to_end(replay_app(path, handle, stream=stream)[0])
    assert first + seen == list(range(100))


# ---- Durable consumers: "The stored position must follow a seek (at-least-once: nothing
# after the new position skipped, nothing the user skipped replayed), and the seeking
# delivery's own settle counts."


def _durable_replay(
    path: Path, seen: list[int], seek_on: dict[int, Position], **options: object
) -> App:
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        target = seek_on.pop(n, None)
        if target is not None:
            await ctx.seeker.seek(target)

    stream = FileStream("orders", durable="c", start_at=FilePosition.beginning()).replay()
    app, broker = file_app(path, existing_only=True)
    broker.subscriber(stream, name="sub", **options)(handle)  # type: ignore[arg-type]
    return app


@pytest.mark.parametrize("workers", [1, 4])
async def test_a_durable_consumer_that_seeks_to_the_tip_and_stops_does_not_redeliver_on_restart(
    tmp_path: Path, workers: int
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 20, key="orders")
    seen: list[int] = []
    await run_to_end(_durable_replay(path, seen, {1: FilePosition.end()}, workers=workers))
    assert 1 in seen
    if workers == 1:
        assert seen == [1]
    first = len(seen)
    write_numbers(path, 2, key="orders", first=21)
    await run_to_end(_durable_replay(path, seen, {}, workers=workers))
    assert seen[first:] == [21, 22]


async def test_a_live_durable_consumer_that_seeks_to_the_tip_and_is_closed_resumes_there(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 20, key="orders")
    seen: list[int] = []
    first_handled = trio.Event()
    app, broker = file_app(path, existing_only=True)

    @broker.subscriber(FileStream("orders", durable="c", start_at=FilePosition.beginning()))
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 1:
            await ctx.seeker.seek(FilePosition.end())
            first_handled.set()

    async with serving(app):
        with trio.fail_after(10):
            await first_handled.wait()
    assert 20 not in seen
    write_numbers(path, 1, key="orders", first=21)
    again: list[int] = []
    app, broker = file_app(path, existing_only=True)
    got = trio.Event()

    @broker.subscriber(FileStream("orders", durable="c"))
    async def resumed(n: int) -> None:
        again.append(n)
        got.set()

    async with serving(app):
        with trio.fail_after(10):
            await got.wait()
    assert again == [21]


async def test_a_backward_seek_moves_the_stored_position_back_and_nothing_after_it_is_skipped(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 20, key="orders")
    seen: list[int] = []
    watch = Watch()

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 15 and seen.count(15) == 1:
            await ctx.seeker.seek(FilePosition.sequence(5))
            (await watch.running()).request_stop()

    stream = FileStream("orders", durable="c", start_at=FilePosition.beginning()).replay()
    app, broker = file_app(path, existing_only=True)
    broker.subscriber(stream, count=1, buffer=1)(handle)
    await watch.run_to_end(app)
    restarted: list[int] = []
    await run_to_end(_durable_replay(path, restarted, {}))
    # Whatever the first run handled after the seek, the restart starts no later than it left
    # off and covers every message from 5 on.
    handled_after_seek = seen[15:]
    assert restarted == list(range(5 + len(handled_after_seek), 21))


async def test_a_crash_right_after_a_seek_resumes_at_the_seek_target(tmp_path: Path) -> None:
    """The store follows the seek at once, not only at the next periodic save."""
    path = tmp_path / "s.ss"
    write_numbers(path, 20, key="orders")
    state = tmp_path / "s.ss.consumers" / "c.json"
    checked = trio.Event()

    async def handle(n: int, ctx: Context) -> None:
        if n == 3:
            await ctx.seeker.seek(FilePosition.sequence(12))
            stored = json.loads(state.read_text())
            assert stored["sequence"] is None and stored["offset"] is not None
            checked.set()

    stream = FileStream("orders", durable="c", start_at=FilePosition.beginning()).replay()
    app, broker = file_app(path, existing_only=True, durable_interval=3600)
    broker.subscriber(stream, count=1, buffer=1)(handle)
    await run_to_end(app)
    assert checked.is_set()


# ---- "Only a sequence past the next one the file will write is refused, and both transports
# give the same answer" — over a table of seek scenarios.


@dataclass(frozen=True)
class Scenario:
    name: str
    seek_on: int  # the payload whose first delivery seeks
    target: Position
    live: bool = False


SCENARIOS = [
    Scenario("sequence-back", 6, Position.sequence(2)),
    Scenario("sequence-forward", 2, Position.sequence(7)),
    Scenario("sequence-self", 4, Position.sequence(4)),
    Scenario("sequence-0", 3, Position.sequence(0)),
    Scenario("sequence-last", 3, Position.sequence(8)),
    Scenario("sequence-next", 3, Position.sequence(9)),
    Scenario("sequence-past-next", 3, Position.sequence(10)),
    Scenario("sequence-far", 3, Position.sequence(2**64 - 1)),
    Scenario("beginning", 5, Position.beginning()),
    Scenario("end", 2, Position.end()),
    Scenario("named-stream", 5, Position.sequence(3, stream="s")),
    Scenario("other-stream", 5, Position.sequence(3, stream="t")),
    Scenario("empty-stream-sequence-0", 3, Position.sequence(0, stream="e")),
    Scenario("live-sequence-back", 6, Position.sequence(2), live=True),
    Scenario("live-past-next", 3, Position.sequence(10), live=True),
    Scenario("live-end", 3, Position.end(), live=True),
]


async def _run_scenario(app: App, broker: object, scenario: Scenario, *, file: bool) -> list[str]:
    """Run one scenario on 8 messages (payload n = sequence n of stream s); a live one then gets
    message 9 published after its seek, and is stopped once that arrives."""
    events: list[str] = []
    seek_answered = trio.Event()
    nine = trio.Event()

    async def handle(n: int, ctx: Context) -> None:
        events.append(str(n))
        if n == 9:
            nine.set()
        if n == scenario.seek_on and not seek_answered.is_set():
            try:
                await ctx.seeker.seek(scenario.target)
                events.append("moved")
            except SeekRefused:
                events.append("refused")
            seek_answered.set()

    streams = ("s", "e") if scenario.target.stream == "e" else ("s",)
    if "e" in streams:
        # The app publishes to "e": a replay of it may start while the file holds none of it.
        broker.publisher("e")  # type: ignore[attr-defined]
    if file:
        source = FileStream(*streams, start_at=FilePosition.beginning())
        source = source if scenario.live else source.replay()
    else:
        from trio_streams import MemoryStream

        source = MemoryStream(*streams, start_at=Position.beginning())  # type: ignore[assignment]
        source = source if scenario.live else source.replay()
    broker.subscriber(source, buffer=2, count=2, name="sub")(handle)  # type: ignore[attr-defined]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            if scenario.live:
                await seek_answered.wait()
                if "moved" in events:
                    await running.publish(broker, "s", 9)
                    await nine.wait()
                    running.request_stop()
            await running.wait_stopped()
    return events


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
async def test_the_file_and_in_process_transports_answer_every_seek_scenario_alike(
    tmp_path: Path, scenario: Scenario
) -> None:
    from trio_streams import MemoryBroker

    path = tmp_path / "s.ss"
    write_numbers(path, 8)
    file_app_, file_broker = file_app(path, existing_only=True)
    on_file = await _run_scenario(file_app_, file_broker, scenario, file=True)

    memory_app = App("memory")
    memory_broker = memory_app.broker(MemoryBroker())
    for n in range(1, 9):
        memory_broker.hub.append("s", str(n).encode(), {})
    in_process = await _run_scenario(memory_app, memory_broker, scenario, file=False)
    assert on_file == in_process
    assert "moved" in on_file or "refused" in on_file


async def test_sequence_0_of_a_key_with_no_messages_lands_at_the_tip_on_a_file(
    tmp_path: Path,
) -> None:
    path = tmp_path / "s.ss"
    write_numbers(path, 3)
    moved = trio.Event()
    app, broker = file_app(path, existing_only=True)
    got: list[tuple[str, int]] = []
    done = trio.Event()

    @broker.subscriber(FileStream("s", "fresh"))
    async def handle(n: int, ctx: Context) -> None:
        got.append((ctx.stream, n))
        if ctx.stream == "s" and n == 4:
            await ctx.seeker.seek(FilePosition.sequence(0, stream="fresh"))
            moved.set()
        if ctx.stream == "fresh":
            done.set()

    async with serving(app) as running:
        with trio.fail_after(10):
            await running.publish(broker, "s", 4)
            await moved.wait()
            await running.publish(broker, "fresh", 1)
            await done.wait()
    assert got == [("s", 4), ("fresh", 1)]


def test_stream_writer_of_scenarios_is_deterministic(tmp_path: Path) -> None:
    """The scenario files hold what the table assumes: payload n is sequence n of stream s."""
    path = tmp_path / "s.ss"
    write_numbers(path, 8)
    with StreamWriter(path) as writer:
        assert writer.last_seq("s") == 8
        assert writer.last_seq("e") == 0


# ---- The conformance suite checks only that these are refused (any transport words its own
# refusals); what the file transport says is checked here.


async def refused_live_seek(tmp_path: Path, position: Position) -> str:
    """What a live file subscription's refusal of a seek to ``position`` says."""
    app = App("seek")
    broker = app.broker(FileBroker(tmp_path / "s.ss"))
    refusals: list[str] = []

    @broker.subscriber(FileStream("s"))
    async def handle(n: int, ctx: Context) -> None:
        try:
            await ctx.seeker.seek(position)
        except SeekRefused as refused:
            refusals.append(str(refused))

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await broker.publish("s", 1)
            await running.wait_stopped()  # the refusal ended the subscription
    assert len(refusals) == 1
    return refusals[0]


async def test_a_refused_live_seek_says_there_is_no_message_later_than_the_instant(
    tmp_path: Path,
) -> None:
    said = await refused_live_seek(tmp_path, Position.timestamp(MAX_TIMESTAMP_MS))
    assert "no message" in said and "later than" in said


async def test_a_seek_to_an_entry_id_is_refused_naming_it(tmp_path: Path) -> None:
    assert "entry id" in await refused_live_seek(tmp_path, Position.entry("1526985054069-0"))


def test_a_source_refuses_to_start_at_an_entry_id_saying_what_entry_ids_address() -> None:
    with pytest.raises(ConfigurationError, match="entry ids address Redis streams"):
        FileStream("s", start_at=Position.entry("1-0")).replay()
