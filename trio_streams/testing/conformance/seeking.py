"""The Seeking contract (docs: Architecture, Seeking), for every transport that can seek.

Streams hold messages whose payload is their sequence number, so ``seen`` lists read like
positions.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest
import trio
import trio.testing

from trio_streams import (
    App,
    Broker,
    ConfigurationError,
    Context,
    InvalidPosition,
    Position,
    RunningApp,
    Seeker,
    SeekRefused,
)
from trio_streams.core.positions import MAX_SEQUENCE, MAX_TIMESTAMP_MS, PositionKind
from trio_streams.core.subscription import SubscriptionStats

from ._running import Watch, run_to_end, serving
from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite

Handler = Callable[[int, Context], Awaitable[None]]


async def replay_app(
    transport: TransportUnderTest,
    count: int,
    handler: Handler,
    *,
    workers: int = 1,
    buffer: int = 4,
    read: int = 4,
) -> tuple[App, Broker]:
    """An app replaying ``count`` preloaded messages of ``s`` through subscription ``sub``
    (``read``: messages the transport takes per read)."""
    transport.require(Capability.SEEK, Capability.REPLAY)
    app, broker = transport.app("seek")
    await transport.preload(broker, count)
    mount = broker.subscriber(
        transport.replay(), workers=workers, buffer=buffer, count=read, name="sub"
    )
    mount(handler)
    return app, broker


async def replay_with_seeks(
    transport: TransportUnderTest,
    count: int,
    seeks: Mapping[tuple[int, int], Position],
    **options: Any,
) -> list[int]:
    """Replay ``count`` messages; on the k-th delivery of message n, seek to ``seeks[(n, k)]``.
    Returns the messages in the order they were handled."""
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        target = seeks.get((n, seen.count(n)))
        if target is not None:
            await ctx.seeker.seek(target)

    await run_to_end((await replay_app(transport, count, handle, **options))[0])
    return seen


class Seeking(TransportSuite):
    """The Seeking contract, on every transport that can seek (``SEEK``)."""

    # ---- "ctx.seeker.seek(position) sends a command to the subscription's driver; the driver
    # runs the client's seek to completion, outside any race with the next read, and answers
    # when done."

    @needs(Capability.SEEK)
    async def test_the_driver_runs_a_seek_to_completion_outside_any_race_with_the_next_read(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("seek")
        await transport.preload(broker, 5)
        seen: list[int] = []
        done = trio.Event()

        @broker.subscriber(transport.live("s"), name="live")
        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 6 and seen.count(6) == 1:
                # The driver is waiting at the tip for the next message: the seek wakes it, runs,
                # answers.
                await ctx.seeker.seek(transport.preloaded_position(2))
            if len(seen) == 6:
                done.set()

        async with serving(app):
            await broker.publish(transport.to("s"), 6)
            with trio.fail_after(10):
                await done.wait()
        assert seen == [6, 2, 3, 4, 5, 6]

    # ---- "Positions: beginning, end (the tip), sequence(n) — inclusive, so seeking to a position
    # read off a delivery delivers that message again — and timestamp(ms) — the first message
    # strictly later; milliseconds in the API, converted without loss; an out-of-range value is
    # refused before the client sees it."

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_seeking_to_the_beginning_and_to_the_end_the_tip(
        self, transport: TransportUnderTest
    ) -> None:
        seeks = {(4, 1): Position.beginning(), (2, 2): Position.end()}
        assert await replay_with_seeks(transport, 6, seeks) == [1, 2, 3, 4, 1, 2]

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_a_sequence_is_inclusive_so_a_captured_position_redelivers_exactly_that_message(
        self, transport: TransportUnderTest
    ) -> None:
        seen: list[int] = []
        captured: list[Position] = []

        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 3 and not captured:
                assert ctx.position is not None
                captured.append(ctx.position)
            if n == 7 and seen.count(7) == 1:
                await ctx.seeker.seek(captured[0])

        await run_to_end((await replay_app(transport, 8, handle))[0])
        assert captured == [Position.sequence(3, stream="s")]
        assert seen == [1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 8]

    @needs(Capability.SEEK, Capability.REPLAY, Capability.PIN_INSTANTS)
    async def test_a_timestamp_seek_lands_on_the_first_message_strictly_later(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("seek")
        # Several messages share an instant: "strictly later" skips all of them.
        await transport.preload_at(broker, [1_000, 2_000, 2_000, 2_000, 3_000, 4_000])
        seen: list[int] = []

        @broker.subscriber(transport.replay("s"), count=1)
        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 6 and seen.count(6) == 1:
                await ctx.seeker.seek(Position.timestamp(2_000))

        await run_to_end(app)
        assert seen == [1, 2, 3, 4, 5, 6, 5, 6]

    @needs(Capability.SEEK, Capability.REPLAY)
    @pytest.mark.parametrize(
        ("build", "what"),
        [
            (lambda: Position.sequence(MAX_SEQUENCE + 1), "a sequence past u64"),
            (lambda: Position.sequence(-1), "a negative sequence"),
            (lambda: Position.timestamp(MAX_TIMESTAMP_MS + 1), "an instant past year 9999"),
        ],
        ids=["sequence-too-large", "sequence-negative", "timestamp-too-late"],
    )
    async def test_an_out_of_range_value_is_refused_before_the_client_sees_it(
        self, transport: TransportUnderTest, build: Callable[[], Position], what: str
    ) -> None:
        with pytest.raises(InvalidPosition):
            build()  # refused where it is made, long before any driver
        errors: list[BaseException] = []

        async def handle(n: int, ctx: Context) -> None:
            try:
                await ctx.seeker.seek(n)  # type: ignore[arg-type]
            except TypeError as exc:
                errors.append(exc)

        await run_to_end((await replay_app(transport, 2, handle))[0])
        assert len(errors) == 2, what
        assert "takes a Position" in str(errors[0])

    # ---- "A seek that moved the reader opens a new generation, published before seek returns;
    # every queued delivery of an older generation is dropped, so nothing read at the old position
    # reaches the handler after seek returns."

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_a_seek_that_moved_the_reader_opens_a_new_generation_before_it_returns(
        self, transport: TransportUnderTest
    ) -> None:
        generations: list[tuple[int, int]] = []

        async def handle(n: int, ctx: Context) -> None:
            if n == 2 and not generations:
                before = ctx.seeker.generation
                await ctx.seeker.seek(Position.sequence(9))
                generations.append((before, ctx.seeker.generation))

        await run_to_end((await replay_app(transport, 10, handle))[0])
        assert generations == [(0, 1)]

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_every_queued_delivery_of_an_older_generation_is_dropped(
        self, transport: TransportUnderTest
    ) -> None:
        seen: list[int] = []
        stale: list[int] = []

        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 10:
                await ctx.seeker.seek(Position.sequence(50))

        app, _ = await replay_app(transport, 60, handle, buffer=8, read=8)
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await running.wait_finished()
                stale.append(running.stats()["sub"].stale)
        assert seen == [*range(1, 11), *range(50, 61)]
        assert stale[0] > 0  # the channel held 11.. and they were purged unhandled

    @needs(Capability.SEEK, Capability.REPLAY, Capability.VIRTUAL_TIME)
    async def test_nothing_read_at_the_old_position_reaches_a_handler_after_seek_returns(
        self, transport: TransportUnderTest, autojump_clock: trio.abc.Clock
    ) -> None:
        seeked = False
        started: list[tuple[bool, int]] = []

        async def handle(n: int, ctx: Context) -> None:
            nonlocal seeked
            started.append((seeked, n))
            await trio.sleep(0.01 * (n % 3))  # handlers finish out of order
            if n == 20 and not seeked:
                await ctx.seeker.seek(Position.sequence(100))
                seeked = True  # no checkpoint between the seek returning and this

        await run_to_end(
            (await replay_app(transport, 120, handle, workers=4, buffer=16, read=16))[0]
        )
        after = [n for was_seeked, n in started if was_seeked]
        assert sorted(after) == list(range(100, 121))

    # ---- "A refused seek (e.g. a sequence past the next one the file will write) leaves a replay
    # where it was, with what it had read still queued; a live subscription ends instead."

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_a_refused_seek_keeps_a_replay_where_it_was_with_what_it_had_read_still_queued(
        self, transport: TransportUnderTest
    ) -> None:
        seen: list[int] = []
        refusals: list[str] = []
        stats: list[SubscriptionStats] = []
        watch = Watch()

        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 3:
                running = await watch.running()
                stats.append(running.stats()["sub"])
                try:
                    await ctx.seeker.seek(Position.sequence(500))  # the next one is 11
                except SeekRefused as refused:
                    refusals.append(str(refused))
                stats.append(running.stats()["sub"])

        await watch.run_to_end((await replay_app(transport, 10, handle, buffer=4, read=4))[0])
        assert seen == list(range(1, 11))
        assert len(refusals) == 1
        assert stats[0].queued > 0  # deliveries 4.. were queued when the seek was refused
        assert [(s.generation, s.stale) for s in stats] == [(0, 0), (0, 0)]  # and none was dropped
        for fragment in transport.past_the_end_refusal(asked=500, last=10):
            assert fragment in refusals[0]

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_seeking_to_the_next_sequence_to_be_written_is_allowed_and_waits_at_the_tip(
        self, transport: TransportUnderTest
    ) -> None:
        seeks = {(2, 1): Position.sequence(6)}  # the tip: nothing more to replay
        assert await replay_with_seeks(transport, 5, seeks) == [1, 2]

    @needs(Capability.SEEK)
    async def test_a_refused_seek_ends_a_live_subscription(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("seek")
        seen: list[int] = []
        refusals: list[str] = []

        @broker.subscriber(transport.live("s"), name="live")
        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            try:
                await ctx.seeker.seek(Position.timestamp(MAX_TIMESTAMP_MS))
            except SeekRefused as refused:
                refusals.append(str(refused))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await broker.publish(transport.to("s"), 1)
                await running.wait_finished()
                assert running.subscriptions["live"].value == "ended"
                await broker.publish(transport.to("s"), 2)  # nobody reads it any more
                await running.wait_stopped()  # every subscription ended: the app stops by itself
        assert seen == [1]
        assert len(refusals) == 1  # in the transport's own words: the type is the contract

    # ---- "A replay that reached the end of the file can still seek, and delivers again from the
    # new position."

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_a_replay_that_reached_the_end_can_still_seek_and_delivers_again_from_there(
        self, transport: TransportUnderTest
    ) -> None:
        # Each time message 5 is handled the replay has read everything and reported its end: this
        # handler is the last one in flight.
        seeks = {(5, 1): Position.sequence(4), (5, 2): Position.beginning()}
        seen = await replay_with_seeks(transport, 5, seeks, read=64, buffer=64)
        assert seen == [1, 2, 3, 4, 5, 4, 5, 1, 2, 3, 4, 5]

    # ---- "Seeks are served while the delivery channel is full: the handler waiting on a seek
    # may be the one that stopped draining."

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_seeks_are_served_while_the_channel_is_full_and_its_handler_is_the_one_waiting(
        self, transport: TransportUnderTest
    ) -> None:
        seen: list[int] = []
        before_seek: list[tuple[int, int]] = []
        watch = Watch()

        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 1:
                running = await watch.running()
                # buffer=1 and read=4: the driver blocks sending into the full channel, and this
                # handler, the only worker, is the one that stopped draining it.
                await trio.testing.wait_all_tasks_blocked()
                stats = running.stats()["sub"]
                before_seek.append((stats.queued, stats.held))
                await ctx.seeker.seek(Position.sequence(30))

        await watch.run_to_end((await replay_app(transport, 32, handle, buffer=1, read=4))[0])
        assert before_seek == [(1, 2)]  # channel full (1 of 1), two more read and held
        assert seen == [1, 30, 31, 32]

    # ---- "After shutdown, every seek is refused."

    @needs(Capability.SEEK)
    @pytest.mark.parametrize(
        "live", [pytest.param(False, marks=needs(Capability.REPLAY)), True], ids=["replay", "live"]
    )
    async def test_after_shutdown_every_seek_is_refused(
        self, transport: TransportUnderTest, live: bool
    ) -> None:
        seekers: list[Seeker] = []
        handled = trio.Event()

        async def handle(n: int, ctx: Context) -> None:
            seekers.append(ctx.seeker)
            handled.set()

        if live:
            app, broker = transport.app("seek")
            broker.subscriber(transport.live("s"), name="sub")(handle)
            async with serving(app):  # shut down gracefully at the end of the block
                await broker.publish(transport.to("s"), 1)
                with trio.fail_after(10):
                    await handled.wait()
        else:
            await run_to_end((await replay_app(transport, 3, handle))[0])
        assert seekers
        refusals: list[str] = []
        for position in (Position.beginning(), Position.sequence(1), Position.end()):
            try:
                await seekers[0].seek(position)
            except SeekRefused as refused:
                refusals.append(str(refused))
        assert len(refusals) == 3
        assert all("has stopped" in text for text in refusals)

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_a_redis_entry_id_is_refused_to_the_handler_not_the_app_where_streams_use_sequences(  # noqa: E501
        self, transport: TransportUnderTest
    ) -> None:
        """Stream files and in-process streams are addressed by sequence numbers and instants."""
        app, broker = transport.app("entry")
        await transport.preload(broker, 3)
        refusals: list[str] = []
        seen: list[int] = []

        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 2:
                try:
                    await ctx.seeker.seek(Position.entry("1526985054069-0"))
                except SeekRefused as exc:
                    refusals.append(str(exc))

        broker.subscriber(transport.replay("s"), name="sub")(handle)
        await run_to_end(app)
        assert seen == [1, 2, 3]
        assert len(refusals) == 1  # in the transport's own words: the type is the contract

    @needs(Capability.SEEK, Capability.REPLAY)
    def test_a_source_that_reads_sequences_refuses_to_start_at_an_entry_id(
        self, transport: TransportUnderTest
    ) -> None:
        with pytest.raises(ConfigurationError):
            transport.replay("s", start_at=Position.entry("1-0"))

    @needs(Capability.SEEK, Capability.REPLAY)
    async def test_a_raw_constructor_position_fails_the_handler_that_built_it_not_the_app(
        self, transport: TransportUnderTest
    ) -> None:
        errors: list[BaseException] = []
        seen: list[int] = []

        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 2 and ctx.attempt == 1:
                try:
                    await ctx.seeker.seek(Position(PositionKind.SEQUENCE, None))
                except InvalidPosition as exc:
                    errors.append(exc)

        await run_to_end((await replay_app(transport, 5, handle))[0])
        assert len(errors) == 1
        assert seen == [1, 2, 3, 4, 5]

    # ---- "An ended live subscription delivers nothing more": a refused live seek drops what
    # the subscription had read and queued.

    @needs(Capability.SEEK, Capability.POSITIONS, Capability.RETAIN)
    async def test_a_refused_live_seek_ends_the_subscription_and_delivers_nothing_more(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("seek")
        await transport.preload(broker, 40)
        seen: list[int] = []
        refused = trio.Event()

        @broker.subscriber(
            transport.live("s", start_at=Position.beginning()), buffer=16, name="live"
        )
        async def handle(n: int, ctx: Context) -> None:
            seen.append(n)
            if n == 2:
                with pytest.raises(SeekRefused):
                    await ctx.seeker.seek(Position.sequence(500))
                refused.set()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await running.wait_stopped()  # its only subscription ended: the app stops
        assert refused.is_set()
        assert seen == [1, 2]
        assert running.stats()["live"].stale >= 1

    # ---- "After shutdown begins every seek is refused, and no stream of seek requests can
    # starve the driver's reads or its stop."

    @needs(Capability.SEEK)
    @pytest.mark.parametrize(
        "live",
        [
            pytest.param(False, marks=needs(Capability.REPLAY)),
            pytest.param(True, marks=needs(Capability.POSITIONS, Capability.RETAIN)),
        ],
        ids=["replay", "live"],
    )
    async def test_after_shutdown_begins_every_seek_is_refused_and_the_drain_is_prompt(
        self, transport: TransportUnderTest, live: bool
    ) -> None:
        app, broker = transport.app("seek", shutdown_timeout=30)
        await transport.preload(broker, 50)
        moved_after_stop = 0
        refused_after_stop = 0
        stopping = False
        looping = trio.Event()
        source = transport.live("s", start_at=Position.beginning()) if live else transport.replay()

        @broker.subscriber(source, workers=4, buffer=8)
        async def handle(n: int, ctx: Context) -> None:
            nonlocal moved_after_stop, refused_after_stop
            while True:
                looping.set()
                try:
                    await ctx.seeker.seek(transport.preloaded_position(1 + n % 7))
                except SeekRefused:
                    if stopping:
                        refused_after_stop += 1
                    return
                if stopping:
                    moved_after_stop += 1

        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            with trio.fail_after(10):
                await looping.wait()
                for _ in range(200):
                    await trio.lowlevel.checkpoint()  # let the seek storm build up
                stopping = True
                with trio.CancelScope() as clock:
                    clock.deadline = trio.current_time() + 10
                    await running.aclose()
                assert not clock.cancelled_caught
        # The seek in progress when the stop came may finish; nothing later moves the reader.
        assert moved_after_stop <= 4
        assert refused_after_stop >= 1

    @needs(Capability.SEEK, Capability.REPLAY, Capability.VIRTUAL_TIME)
    async def test_a_seek_storm_does_not_starve_the_reads(
        self, transport: TransportUnderTest, autojump_clock: trio.abc.Clock
    ) -> None:
        """Four workers that re-seek as soon as they hear back still let the driver read on."""
        seen: set[int] = set()

        async def handle(n: int, ctx: Context) -> None:
            seen.add(n)
            if n % 50 == 0 and len(seen) < 200:
                for _ in range(3):
                    await ctx.seeker.seek(Position.sequence(n + 1))

        app, _ = await replay_app(transport, 200, handle, workers=4, buffer=4, read=4)
        await run_to_end(app, seconds=60)
        assert seen == set(range(1, 201))
