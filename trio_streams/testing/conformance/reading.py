"""Reading, stated once for every transport: replays, live subscriptions, starting positions.

Streams hold messages whose payload is their sequence number.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from trio_streams import Context, Position, RunningApp
from trio_streams.core.host import SubscriptionHost
from trio_streams.core.transport import SubscriptionSource

from ._running import serving
from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite

#: How long the last reads of the cancelled-read test wait for what is still missing (s): a
#: real server's follow may take real time; a lost message makes the test wait this long.
LOST_AFTER = 5

#: How each round of the cancelled-read test publishes, then lets the read run, before it
#: cancels it: (messages, let the read run first). The first round cancels a read of an empty
#: stream; the others land the cancel at different points of a read that has something.
ROUNDS: tuple[tuple[int, Callable[[], Awaitable[None]] | None], ...] = (
    (0, trio.testing.wait_all_tasks_blocked),
    (1, None),
    (1, trio.testing.wait_all_tasks_blocked),
    (2, None),
    (1, trio.lowlevel.checkpoint),
)


async def read_cancelled(
    reader: SubscriptionSource,
    taken: list[int],
    publish: Callable[[], Awaitable[None]],
    *,
    messages: int,
    then: Callable[[], Awaitable[None]] | None,
) -> None:
    """Start a read, wait until it waits, publish ``messages``, run ``then`` and cancel the
    read: what it returned before the cancel came is added to ``taken``."""

    async def read(task_status: trio.TaskStatus[trio.CancelScope]) -> None:
        with trio.CancelScope() as scope:
            task_status.started(scope)
            taken.extend(int(d.payload) for d in await reader.read() or ())

    async with trio.open_nursery() as nursery:
        scope: trio.CancelScope = await nursery.start(read)
        await trio.testing.wait_all_tasks_blocked()  # the read waits for something
        for _ in range(messages):
            await publish()
        if then is not None:
            await then()
        scope.cancel()


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

    # ---- "The driver cancels a waiting read whenever a seek comes and at shutdown: cancelled,
    # a read must have taken nothing it cannot give again."

    async def test_a_read_cancelled_while_it_waits_takes_nothing_it_cannot_give_again(
        self, transport: TransportUnderTest
    ) -> None:
        """The reader alone, as the driver uses it: each read is cancelled while it waits, just
        after messages arrive; later reads must still deliver every one of them."""
        app, broker = transport.app("reading")
        _, shaping = transport.app("shape")  # mounts the subscription, never runs it
        shaping.subscriber(transport.live("s"), name="sub")(_ignore)
        (subscription,) = shaping.subscriptions
        published: list[int] = []
        taken: list[int] = []

        async def publish() -> None:
            published.append(len(published) + 1)
            await broker.publish(transport.to("s"), published[-1])

        async with serving(app):  # connects the broker, for the reader and the publishes
            reader = broker.transport.open_subscription(
                subscription.source, subscription.transport_options, label="sub"
            )
            try:
                async with trio.open_nursery() as services:
                    host = SubscriptionHost(
                        "sub",
                        subscription.options,
                        services,
                        logger=logging.getLogger("trio_streams.conformance"),
                        on_fault=lambda fault: None,
                    )
                    with trio.fail_after(10):
                        await reader.open(host)
                        for messages, then in ROUNDS:
                            await read_cancelled(
                                reader, taken, publish, messages=messages, then=then
                            )
                    taken.extend(int(d.payload) for d in reader.poll())
                    with trio.move_on_after(LOST_AFTER):
                        while not set(published) <= set(taken):
                            taken.extend(int(d.payload) for d in await reader.read() or ())
                    services.cancel_scope.cancel()
            finally:
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await reader.aclose()
        lost = [n for n in published if n not in taken]
        assert not lost, (
            f"message(s) {lost} of {published}, published while a read waited, were never "
            f"delivered (read: {taken}): a read cancelled while it waited took them and did not "
            "give them back, so cancelled, a read must have taken nothing it cannot give again"
        )


async def _ignore(n: int) -> None:
    """The handler of a subscription that is mounted, never run."""
