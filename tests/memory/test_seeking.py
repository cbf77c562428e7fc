"""The Seeking contract, on the in-process transport: one test per sentence.

``ctx.seeker.seek(position)`` sends a command to the subscription's driver, which runs the seek
to completion outside any race with the next read and answers when done.
"""

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import (
    App,
    Context,
    MemoryBroker,
    MemoryStream,
    Position,
    SeekRefused,
    UnsupportedError,
)
from trio_streams.positions import PositionKind

Handler = Callable[[int, Context], Awaitable[None]]


def replay_app(
    count: int, handler: Handler, *, workers: int = 1, buffer: int = 4, stream: str = "s"
) -> tuple[App, MemoryBroker]:
    """An app replaying ``count`` messages (payloads 1..count, so payload == sequence)."""
    app = App("seek")
    broker = app.broker(MemoryBroker())
    for n in range(1, count + 1):
        broker.hub.append(stream, str(n).encode(), {})
    broker.subscriber(
        MemoryStream(stream).replay(), workers=workers, buffer=buffer, count=4, name="sub"
    )(handler)
    return app, broker


async def run_to_end(app: App) -> None:
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()


async def test_a_seek_runs_while_the_driver_waits_at_the_live_tip() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    for n in range(1, 6):
        broker.hub.append("s", str(n).encode(), {})
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="live")
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 6 and seen.count(6) == 1:
            await ctx.seeker.seek(Position.sequence(2))  # driver is parked at the tip
        if len(seen) == 6:
            done.set()

    async with serving(app):
        await broker.publish("s", 6)
        with trio.fail_after(5):
            await done.wait()
    assert seen == [6, 2, 3, 4, 5, 6]


async def test_seek_to_a_captured_position_redelivers_exactly_that_message() -> None:
    seen: list[int] = []
    captured: list[Position] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 3 and not captured:
            assert ctx.position is not None
            captured.append(ctx.position)
        if n == 7 and seen.count(7) == 1:
            await ctx.seeker.seek(captured[0])

    app, _ = replay_app(8, handle)
    await run_to_end(app)
    assert captured == [Position.sequence(3, stream="s")]
    assert seen == [1, 2, 3, 4, 5, 6, 7, 3, 4, 5, 6, 7, 8]


async def test_positions_beginning_and_end() -> None:
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 4 and seen.count(4) == 1:
            await ctx.seeker.seek(Position.beginning())
        elif n == 2 and seen.count(2) == 2:
            await ctx.seeker.seek(Position.end())

    app, _ = replay_app(6, handle)
    await run_to_end(app)
    assert seen == [1, 2, 3, 4, 1, 2]


async def test_timestamp_positions_are_strictly_later() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    hub = broker.hub
    stamps: dict[int, int] = {}
    for n in range(1, 6):
        entry = hub.append("s", str(n).encode(), {})
        entry.timestamp_ms = 1_000 * n  # pin the instants
        stamps[n] = entry.timestamp_ms
    seen: list[int] = []

    @broker.subscriber(MemoryStream("s").replay(), count=1)
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 5 and seen.count(5) == 1:
            await ctx.seeker.seek(Position.timestamp(stamps[2]))

    await run_to_end(app)
    assert seen == [1, 2, 3, 4, 5, 3, 4, 5]


async def test_a_seek_that_moved_the_reader_opens_a_new_generation_before_it_returns() -> None:
    generations: list[tuple[int, int]] = []

    async def handle(n: int, ctx: Context) -> None:
        if n == 2 and not generations:
            before = ctx.seeker.generation
            await ctx.seeker.seek(Position.sequence(9))
            generations.append((before, ctx.seeker.generation))

    app, _ = replay_app(10, handle)
    await run_to_end(app)
    assert generations == [(0, 1)]


async def test_queued_old_generation_deliveries_are_dropped() -> None:
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 10:
            await ctx.seeker.seek(Position.sequence(50))

    app, _ = replay_app(60, handle, buffer=8)
    stale = []

    @app.on_shutdown
    async def count_stale() -> None: ...

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await running.wait_stopped()
        stale.append(running._runners[0].channel.stale_count)
    assert seen == list(range(1, 11)) + list(range(50, 61))
    assert stale[0] > 0  # the channel held 11.. and they were purged


async def test_nothing_read_at_the_old_position_reaches_a_handler_after_seek_returns(
    autojump_clock: trio.abc.Clock,
) -> None:
    seeked = False
    started: list[tuple[bool, int]] = []

    async def handle(n: int, ctx: Context) -> None:
        nonlocal seeked
        started.append((seeked, n))
        await trio.sleep(0.01 * (n % 3))
        if n == 20 and not seeked:
            await ctx.seeker.seek(Position.sequence(100))
            seeked = True  # no checkpoint between the seek returning and this

    app, _ = replay_app(120, handle, workers=4, buffer=16)
    await run_to_end(app)
    after = [n for was_seeked, n in started if was_seeked]
    assert after and all(n >= 100 for n in after)
    assert sorted(after) == list(range(100, 121))


async def test_a_refused_seek_keeps_a_replay_where_it_was_with_its_queue() -> None:
    seen: list[int] = []
    refusals: list[str] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 3:
            with pytest.raises(SeekRefused) as refused:
                await ctx.seeker.seek(Position.sequence(500))  # past the next sequence (11)
            refusals.append(str(refused.value))

    app, _ = replay_app(10, handle, buffer=4)
    await run_to_end(app)
    assert seen == list(range(1, 11))  # queued deliveries 4.. were kept
    assert "sequence 500 of stream 's' is past the next one it will write (11)" in refusals[0]


async def test_seeking_to_the_next_sequence_is_allowed_and_waits_at_the_tip() -> None:
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 2:
            await ctx.seeker.seek(Position.sequence(6))  # next to be written

    app, _ = replay_app(5, handle)
    await run_to_end(app)
    assert seen == [1, 2]


async def test_a_refused_seek_ends_a_live_subscription() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []

    @broker.subscriber(MemoryStream("s"), name="live")
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        with pytest.raises(SeekRefused, match="no message later than"):
            await ctx.seeker.seek(Position.timestamp(253_402_300_799_999))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await broker.publish("s", 1)
            await running.wait_finished()
            assert running.subscriptions["live"].value == "ended"
            await broker.publish("s", 2)  # nobody reads it any more
            await running.wait_stopped()
    assert seen == [1]


async def test_a_replay_that_reached_the_end_can_still_seek_and_delivers_again() -> None:
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 5 and seen.count(5) == 1:
            # The replay has read everything; this handler is the last one in flight.
            await ctx.seeker.seek(Position.sequence(4))

    app, _ = replay_app(5, handle)
    await run_to_end(app)
    assert seen == [1, 2, 3, 4, 5, 4, 5]


async def test_seeks_are_served_while_the_channel_is_full_and_its_handler_waits() -> None:
    seen: list[int] = []

    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 1:
            # buffer=1 and count=4: the driver is blocked sending into a full channel, and
            # this handler, the only worker, is the one that stopped draining it.
            await trio.testing.wait_all_tasks_blocked()
            await ctx.seeker.seek(Position.sequence(30))

    app, _ = replay_app(32, handle, buffer=1)
    await run_to_end(app)
    assert seen == [1, 30, 31, 32]


async def test_after_shutdown_every_seek_is_refused() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    seekers = []

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int, ctx: Context) -> None:
        seekers.append(ctx.seeker)

    async with app.test() as t:
        await t.publish("s", 1)
    with pytest.raises(SeekRefused, match="has stopped"):
        await seekers[0].seek(Position.beginning())


async def test_consumer_group_members_cannot_seek() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    errors: list[Exception] = []

    @broker.subscriber(MemoryStream("s", group="g"))
    async def handle(n: int, ctx: Context) -> None:
        try:
            ctx.seeker  # noqa: B018
        except UnsupportedError as exc:
            errors.append(exc)

    async with app.test() as t:
        await t.publish("s", 1)
    assert "cannot seek" in str(errors[0])


async def test_a_sequence_must_name_its_stream_when_several_are_read() -> None:
    app = App("seek")
    broker = app.broker(MemoryBroker())
    for stream, n in [("a", 1), ("b", 2), ("a", 3), ("b", 4), ("a", 5)]:
        broker.hub.append(stream, str(n).encode(), {})
    seen: list[int] = []
    errors: list[str] = []

    @broker.subscriber(MemoryStream("a", "b").replay())
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 5 and seen.count(5) == 1:
            with pytest.raises(SeekRefused) as refused:
                await ctx.seeker.seek(Position.sequence(1))
            errors.append(str(refused.value))
            # sequence 2 of stream b is the fourth message: both streams resume there
            await ctx.seeker.seek(Position.sequence(2, stream="b"))

    await run_to_end(app)
    assert "must name one of the streams" in errors[0]
    assert seen == [1, 2, 3, 4, 5, 4, 5]


async def test_positions_are_validated_before_any_driver_sees_them() -> None:
    async def handle(n: int, ctx: Context) -> None:
        with pytest.raises(TypeError, match="takes a Position"):
            await ctx.seeker.seek(5)  # type: ignore[arg-type]

    app, _ = replay_app(1, handle)
    await run_to_end(app)
    assert Position.sequence(5).kind is PositionKind.SEQUENCE
