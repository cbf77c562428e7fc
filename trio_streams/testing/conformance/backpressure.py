"""Back-pressure by bounded channels only (docs: Architecture, Tasks and their owners): a slow
handler makes the driver stop reading, never queue more than the channel holds."""

from __future__ import annotations

import trio

from trio_streams.core.subscription import SubscriptionStats

from ._running import Watch
from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite


class Backpressure(TransportSuite):
    """Bounded channels: a slow handler stops the reads instead of queueing more."""

    @needs(Capability.REPLAY, Capability.VIRTUAL_TIME)
    async def test_a_slow_handler_never_lets_more_than_the_channel_capacity_queue(
        self, transport: TransportUnderTest, autojump_clock: trio.abc.Clock
    ) -> None:
        app, broker = transport.app("backpressure")
        await transport.preload(broker, 40)
        seen: list[int] = []
        samples: list[SubscriptionStats] = []
        watch = Watch()

        @broker.subscriber(transport.replay("s"), buffer=2, count=8, name="sub")
        async def slow(n: int) -> None:
            running = await watch.running()
            samples.append(running.stats()["sub"])
            seen.append(n)
            await trio.sleep(1)  # slow work, on Trio's clock
            samples.append(running.stats()["sub"])

        await watch.run_to_end(app, seconds=1000)
        assert seen == list(range(1, 41))  # everything delivered, in order: slowed, not lost
        assert {s.capacity for s in samples} == {2}
        assert max(s.queued for s in samples) == 2  # the channel filled up, and no further
        # What the driver read and could not queue waited with it, bounded by one read.
        assert max(s.held for s in samples) <= 8
