"""Reading, stated once for every transport: replays, live subscriptions, starting positions.

Streams hold messages whose payload is their sequence number.
"""

from __future__ import annotations

import trio

from trio_streams import Context, Position, RunningApp

from ._running import serving
from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite


class Reading(TransportSuite):
    """Replays, live subscriptions and where they start."""

    @needs(Capability.REPLAY)
    async def test_a_replay_delivers_every_message_in_order_then_the_app_stops_by_itself(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("reading")
        await transport.preload(broker, 50)
        seen: list[int] = []

        @broker.subscriber(transport.replay("s"), count=8, name="replay")
        async def handle(n: int) -> None:
            seen.append(n)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await running.wait_stopped()  # nobody asked it to stop
        assert seen == list(range(1, 51))
        assert running.subscriptions["replay"].value == "ended"

    @needs(Capability.POSITIONS)
    async def test_a_live_subscription_starts_at_the_tip_and_gets_what_is_published_after(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("reading")
        await transport.preload(broker, 3)  # before the tip: never delivered
        seen: list[int] = []
        got_two = trio.Event()

        @broker.subscriber(transport.live("s"), name="live")
        async def handle(n: int) -> None:
            seen.append(n)
            if len(seen) == 2:
                got_two.set()

        async with serving(app) as running:
            await broker.publish(transport.to("s"), 4)
            await broker.publish(transport.to("s"), 5)
            with trio.fail_after(10):
                await got_two.wait()
            assert running.subscriptions["live"].value == "running"  # still following the tail
        assert seen == [4, 5]

    @needs(Capability.REPLAY)
    async def test_start_at_a_sequence_starts_a_replay_there(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("reading")
        await transport.preload(broker, 10)
        seen: list[tuple[int, Position | None]] = []

        @broker.subscriber(transport.replay("s", start_at=Position.sequence(8)))
        async def handle(n: int, ctx: Context) -> None:
            seen.append((n, ctx.position))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await running.wait_stopped()
        assert seen == [(n, Position.sequence(n, stream="s")) for n in (8, 9, 10)]

    @needs(Capability.POSITIONS, Capability.RETAIN)
    async def test_a_live_subscription_started_at_a_sequence_reads_from_there_then_follows(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("reading")
        await transport.preload(broker, 10)
        seen: list[int] = []
        got_four = trio.Event()

        @broker.subscriber(transport.live("s", start_at=Position.sequence(8)))
        async def handle(n: int) -> None:
            seen.append(n)
            if len(seen) == 4:
                got_four.set()

        async with serving(app):
            await broker.publish(transport.to("s"), 11)
            with trio.fail_after(10):
                await got_four.wait()
        assert seen == [8, 9, 10, 11]
