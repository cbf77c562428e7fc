"""The subscription driver on its own: a scripted source, a real channel, no app.

The driver owns the source: it alone calls ``poll``, ``read`` and ``seek``, so a seek never races a
read; seek requests wake it wherever it waits; a seek that moved the reader purges the channel
before the requester hears back; it ends when the source has ended and nothing is in flight.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from trio_streams import Position, SeekRefused
from trio_streams.core._channel import DeliveryChannel
from trio_streams.core.delivery import Delivery
from trio_streams.core.driver import SubscriptionDriver
from trio_streams.core.outcome import Outcome
from trio_streams.core.transport import SubscriptionSource, Unsettled

LOG = logging.getLogger("tests.driver")


class Scripted(SubscriptionSource):
    """A seekable source of numbered deliveries; records every call and checks none overlap."""

    seekable = True
    live = False

    def __init__(self, count: int, *, per_read: int = 2) -> None:
        self.count = count
        self.per_read = per_read
        self.next = 1
        self.calls: list[str] = []
        self.busy = False  # inside read or seek
        self.unsettled_calls: list[tuple[int, Unsettled]] = []
        self.block_reads = trio.Event()
        self.block_reads.set()

    def _enter(self, what: str) -> None:
        assert not self.busy, f"{what} while another read or seek runs"
        self.busy = True
        self.calls.append(what)

    async def read(self) -> Sequence[Delivery] | None:
        self._enter("read")
        try:
            await self.block_reads.wait()
            await trio.lowlevel.checkpoint()
            if self.next > self.count:
                return None
            batch = [
                self._delivery(n)
                for n in range(self.next, min(self.count + 1, self.next + self.per_read))
            ]
            self.next += len(batch)
            return batch
        finally:
            self.busy = False

    async def seek(self, position: Position) -> None:
        self._enter(f"seek {position.value}")
        try:
            await trio.lowlevel.checkpoint()
            assert position.value is not None
            if position.value > self.count + 1:
                raise SeekRefused(f"sequence {position.value} is past the end")
            self.next = position.value
        finally:
            self.busy = False

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        await trio.lowlevel.checkpoint()

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        assert delivery.position is not None and delivery.position.value is not None
        self.unsettled_calls.append((delivery.position.value, why))

    @staticmethod
    def _delivery(n: int) -> Delivery:
        return Delivery("s", str(n).encode(), position=Position.sequence(n, stream="s"))


def driver_for(source: Scripted, capacity: int = 2) -> tuple[SubscriptionDriver, DeliveryChannel]:
    channel = DeliveryChannel(capacity, on_unsettled=source.unsettled)
    return SubscriptionDriver(source, channel, label="sub", logger=LOG), channel


async def drain(channel: DeliveryChannel, into: list[int]) -> None:
    while True:
        try:
            delivery = await channel.receive()
        except trio.EndOfChannel:
            return
        into.append(int(delivery.payload))
        channel.finished(delivery)


async def test_the_driver_reads_everything_then_ends_when_nothing_is_in_flight() -> None:
    source = Scripted(5)
    driver, channel = driver_for(source)
    got: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, channel, got)
            await driver.run()
    assert got == [1, 2, 3, 4, 5]
    assert channel.closed


async def test_a_seek_request_wakes_a_driver_blocked_in_read_and_never_races_it() -> None:
    source = Scripted(5)
    source.block_reads = trio.Event()  # the first read blocks until released
    driver, channel = driver_for(source)
    got: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, channel, got)
            nursery.start_soon(driver.run)
            await trio.testing.wait_all_tasks_blocked()
            assert source.calls == ["read"]  # blocked in it
            await driver.seeker.seek(Position.sequence(4))  # cancels the read, then seeks
            source.block_reads.set()
    assert source.calls[:2] == ["read", "seek 4"]
    assert got == [4, 5]


async def test_a_seek_that_moved_the_reader_purges_the_channel_before_it_returns() -> None:
    source = Scripted(10, per_read=4)
    driver, channel = driver_for(source, capacity=4)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(driver.run)
        with trio.fail_after(10):
            await trio.testing.wait_all_tasks_blocked()  # the channel is full, the driver waits
            assert channel.queued == 4
            generation = channel.generation
            await driver.seeker.seek(Position.sequence(9))
            assert channel.generation == generation + 1
            assert channel.queued == 0  # purged before seek returned
        nursery.cancel_scope.cancel()
    purged = [n for n, why in source.unsettled_calls if why is Unsettled.PURGED]
    assert purged == [1, 2, 3, 4]


async def test_a_refused_seek_leaves_a_replay_where_it_was_and_says_why() -> None:
    source = Scripted(4)
    driver, channel = driver_for(source)
    got: list[int] = []
    refusals: list[str] = []

    async def consume() -> None:
        while True:
            try:
                delivery = await channel.receive()
            except trio.EndOfChannel:
                return
            got.append(int(delivery.payload))
            if got == [1]:
                with pytest.raises(SeekRefused, match="past the end") as refused:
                    await driver.seeker.seek(Position.sequence(99))
                refusals.append(str(refused.value))
            channel.finished(delivery)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(consume)
            await driver.run()
    assert got == [1, 2, 3, 4]
    assert len(refusals) == 1


async def test_after_stop_every_seek_is_refused_queued_or_new() -> None:
    source = Scripted(3)
    source.block_reads = trio.Event()
    driver, _ = driver_for(source)
    outcomes: list[str] = []

    async def ask() -> None:
        try:
            await driver.seeker.seek(Position.sequence(1))
            outcomes.append("moved")
        except SeekRefused as exc:
            outcomes.append(str(exc))

    reading = trio.CancelScope()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_run_in, reading, driver)
            await trio.testing.wait_all_tasks_blocked()
            driver.stop()  # shutdown began
            nursery.start_soon(ask)
            await trio.testing.wait_all_tasks_blocked()
            reading.cancel()
    assert outcomes == ["subscription 'sub' has stopped reading; seek refused"]
    assert not any(call.startswith("seek") for call in source.calls)


async def _run_in(scope: trio.CancelScope, driver: SubscriptionDriver) -> None:
    with scope:
        await driver.run()
