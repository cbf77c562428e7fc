"""The generation-stamped delivery channel between a driver and its dispatcher."""

import itertools

import pytest
import trio
import trio.testing

from trio_streams.core._channel import DeliveryChannel
from trio_streams.core.delivery import Delivery


def make(n: int) -> list[Delivery]:
    return [Delivery("s", str(i).encode()) for i in range(n)]


async def test_send_from_queues_what_fits_and_waits_for_room() -> None:
    channel = DeliveryChannel(2)
    batch = make(3)
    assert await channel.send_from(batch, 0) == 2
    assert channel.queued == 2 and channel.outstanding == 2
    async with trio.open_nursery() as nursery:
        result: list[int] = []

        async def send_rest() -> None:
            result.append(await channel.send_from(batch, 2))

        nursery.start_soon(send_rest)
        await trio.testing.wait_all_tasks_blocked()
        assert result == []  # full: the sender waits
        assert await channel.receive() is batch[0]
    assert result == [3]


async def test_a_seek_interrupt_wakes_a_sender_blocked_on_a_full_channel() -> None:
    channel = DeliveryChannel(1)
    await _send(channel, make(1)[0])
    outcome: list[bool] = []
    async with trio.open_nursery() as nursery:

        async def send() -> None:
            outcome.append(await _send(channel, make(1)[0]))

        nursery.start_soon(send)
        await trio.testing.wait_all_tasks_blocked()
        channel.interrupt()
    assert outcome == [False]
    assert channel.queued == 1
    channel.clear_interrupt()
    assert not channel.interrupted


async def test_advancing_the_generation_purges_every_queued_delivery() -> None:
    idle: list[bool] = []
    channel = DeliveryChannel(8, on_change=lambda: idle.append(True))
    old = make(3)
    await channel.send_from(old, 0)
    assert all(channel.is_current(d) for d in old)
    assert channel.advance_generation() == 3
    assert channel.queued == 0 and channel.outstanding == 0 and channel.stale_count == 3
    assert not any(channel.is_current(d) for d in old)
    assert idle == [True]
    new = make(1)[0]
    await _send(channel, new)
    assert channel.is_current(new) and new.generation == 1


async def test_outstanding_counts_until_the_dispatcher_finishes() -> None:
    channel = DeliveryChannel(4)
    d = make(1)[0]
    await _send(channel, d)
    got = await channel.receive()
    assert channel.queued == 0 and channel.outstanding == 1
    channel.finished(got)
    assert channel.outstanding == 0


async def test_close_lets_receivers_drain_then_end() -> None:
    channel = DeliveryChannel(4)
    await channel.send_from(make(2), 0)
    channel.close()
    await channel.receive()
    await channel.receive()
    with pytest.raises(trio.EndOfChannel):
        await channel.receive()
    with pytest.raises(trio.ClosedResourceError):
        await _send(channel, make(1)[0])


async def test_a_cancelled_receive_takes_nothing(autojump_clock: trio.abc.Clock) -> None:
    channel = DeliveryChannel(4)
    with trio.move_on_after(1) as scope:
        await channel.receive()
    assert scope.cancelled_caught
    d = make(1)[0]
    await _send(channel, d)
    assert await channel.receive() is d


async def test_wait_idle_returns_when_nothing_is_outstanding_or_on_interrupt(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A wait that never returns fails at once: the clock jumps to the deadline.
    with trio.fail_after(1):
        channel = DeliveryChannel(4)
        await channel.wait_idle_or_interrupt()  # nothing outstanding: at once
        d = make(1)[0]
        await _send(channel, d)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(channel.wait_idle_or_interrupt)
            await trio.testing.wait_all_tasks_blocked()
            channel.finished(await channel.receive())
        async with trio.open_nursery() as nursery:
            await _send(channel, make(1)[0])
            nursery.start_soon(channel.wait_idle_or_interrupt)
            await trio.testing.wait_all_tasks_blocked()
            channel.interrupt()


async def test_receive_yields_to_the_scheduler_regularly_even_when_never_waiting() -> None:
    channel = DeliveryChannel(200)
    await channel.send_from(make(200), 0)
    received = 0
    seen_at: list[int] = []

    async def other() -> None:
        while True:
            seen_at.append(received)
            await trio.lowlevel.checkpoint()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(other)
        for _ in range(200):
            await channel.receive()
            received += 1
        nursery.cancel_scope.cancel()
    gaps = [b - a for a, b in itertools.pairwise(seen_at)]
    # The receiver yields every 32 receives; Trio may run the other task first in one batch and
    # last in the next, so between two of its runs there are at most 2 x 32 receives.
    assert max(gaps) <= 64
    assert len(seen_at) >= 200 // 64


def test_capacity_must_be_positive() -> None:
    with pytest.raises(ValueError, match="capacity"):
        DeliveryChannel(0)


async def _send(channel: DeliveryChannel, delivery: Delivery) -> bool:
    """Queue one delivery; False, queueing nothing, if interrupted by a seek request."""
    return await channel.send_from([delivery], 0) == 1
