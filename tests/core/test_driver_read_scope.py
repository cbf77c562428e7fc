"""The driver's reads share one cancel scope until a seek request cancels it: the same as a
scope per read, checked where the two could differ.

- a read cancelled by a seek request delivers nothing, and the seek is served next;
- a read that returns while a seek request cancels the scope still has its batch queued, in
  order, before the seek is served (its deliveries handled, or let go as stale by the seek);
- a read that raises a ``SourceFault`` while a seek request cancels the scope is reported as
  a fault, and the seek is served after it;
- the reads after a seek run in a new scope: a later seek request wakes a later read.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio
import trio.testing

from trio_streams import Position
from trio_streams.core.delivery import Delivery
from trio_streams.core.transport import SourceFault, Unsettled

from .test_driver import Scripted, drain, driver_for


class Racing(Scripted):
    """A source whose ``race``-th read lets a seek request arrive as it returns (or raises)."""

    def __init__(self, count: int, *, race: int, raises: bool = False) -> None:
        super().__init__(count)
        self.race = race
        self.raises = raises
        self.reads = 0
        self.seek_to: Position | None = None
        self.nursery: trio.Nursery | None = None
        self.seeker_seek: object = None

    async def read(self) -> Sequence[Delivery] | None:
        batch = await super().read()
        self.reads += 1
        if self.reads == self.race:
            assert self.nursery is not None and self.seek_to is not None
            self.nursery.start_soon(self.seek_now)
            # The request is queued and has cancelled the read's scope; the read goes on
            # (shielded) and returns what it read.
            with trio.CancelScope(shield=True):
                await trio.testing.wait_all_tasks_blocked()
            if self.raises:
                raise SourceFault("read", "the connection went as the read returned")
        return batch

    async def seek_now(self) -> None:
        assert self.seek_to is not None
        await self.seeker.seek(self.seek_to)  # type: ignore[attr-defined]


async def test_a_read_that_returns_as_a_seek_request_comes_has_its_batch_queued_first() -> None:
    source = Racing(8, race=1)
    driver, channel = driver_for(source, capacity=8)
    source.seeker = driver.seeker  # type: ignore[attr-defined]
    source.seek_to = Position.sequence(7)
    got: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            source.nursery = nursery
            nursery.start_soon(drain, channel, got)
            await driver.run()
    assert source.calls[:2] == ["read", "seek 7"]  # the racing read, then the seek
    handled_or_purged = sorted(got[:2] + [n for n, why in source.unsettled_calls])
    assert handled_or_purged[:2] == [1, 2]  # the racing read's batch was queued, never lost
    assert all(why in (Unsettled.PURGED, Unsettled.STALE) for _, why in source.unsettled_calls)
    assert got[-2:] == [7, 8]


async def test_a_read_that_fails_as_a_seek_request_comes_is_a_fault_then_the_seek_runs() -> None:
    source = Racing(6, race=1, raises=True)
    driver, channel = driver_for(source, capacity=8)
    source.seeker = driver.seeker  # type: ignore[attr-defined]
    source.seek_to = Position.sequence(5)
    got: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            source.nursery = nursery
            nursery.start_soon(drain, channel, got)
            await driver.run()
    assert source.calls[:2] == ["read", "seek 5"]
    assert got == [5, 6]
    assert not source.unsettled_calls


async def test_reads_after_a_seek_are_woken_by_the_next_seek_request() -> None:
    source = Scripted(9)
    source.block_reads = trio.Event()
    driver, channel = driver_for(source)
    got: list[int] = []
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(drain, channel, got)
            nursery.start_soon(driver.run)
            await trio.testing.wait_all_tasks_blocked()
            await driver.seeker.seek(Position.sequence(3))  # cancels the first read
            await trio.testing.wait_all_tasks_blocked()
            assert source.calls == ["read", "seek 3", "read"]  # blocked again, in a new scope
            await driver.seeker.seek(Position.sequence(8))  # and woken again
            source.block_reads.set()
    assert source.calls[:4] == ["read", "seek 3", "read", "seek 8"]
    assert got == [8, 9]
