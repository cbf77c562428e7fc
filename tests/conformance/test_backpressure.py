"""Back-pressure by bounded channels only (docs/architecture.md, "Tasks and their owners"),
stated once for every transport: a slow handler makes the driver stop reading, never queue more
than the channel holds."""

from __future__ import annotations

import trio

from tests.file.apps import Watch
from trio_streams.core.subscription import SubscriptionStats

from .transports import Capability, Transport, needs


@needs(Capability.REPLAY, Capability.VIRTUAL_TIME)
async def test_a_slow_handler_never_lets_more_than_the_channel_capacity_queue(
    transport: Transport, autojump_clock: trio.abc.Clock
) -> None:
    app, broker = transport.app("backpressure")
    transport.preload(broker, 40)
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
