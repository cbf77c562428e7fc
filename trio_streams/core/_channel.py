"""The bounded, generation-stamped channel between a subscription's driver and its dispatcher.

It is a memory channel with three things a plain ``trio.open_memory_channel`` cannot do:

- **Generations.** Every delivery is stamped with the generation current when it was sent. A seek
  that moves the reader advances the generation and purges every queued delivery at once, so
  nothing read at the old position reaches a handler afterwards.
- **Interruption.** The driver may be blocked sending into a full channel while the handler that
  stopped draining it waits for a seek. A seek request interrupts the blocked send, so the driver
  can serve it (Trio's channels offer no such wake-up without a task per send).
- **Reads queued whole.** A source may return a :class:`~.delivery.ReadBatch` (one read's
  messages, made deliveries only when needed): it is one item of the buffer, counted as the
  messages it holds, and handed out one message at a time. A handler of the payload alone takes
  a plain message's payload without a delivery being built (:meth:`take_payload`).
- **Outstanding count.** Deliveries are counted from ``send`` until the dispatcher reports them
  finished (settled, stale or abandoned). The driver uses it to end a finished replay only once
  nothing is in flight, and the test harness to know when a reaction has settled.

One task sends (the driver); any number receive (the dispatcher's workers). Like Trio's own
channels, ``send`` and ``receive`` are checkpoints and are safe to cancel: a cancelled call has
not moved anything.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence

import trio
from trio.lowlevel import ParkingLot, cancel_shielded_checkpoint, checkpoint_if_cancelled

from .delivery import Delivery, ReadBatch
from .schedule import FairShare
from .transport import Unsettled

__all__ = ["DeliveryChannel"]


class DeliveryChannel:
    def __init__(
        self,
        capacity: int,
        *,
        on_change: Callable[[], None] | None = None,
        on_unsettled: Callable[[Delivery, Unsettled], None] | None = None,
    ) -> None:
        if capacity < 1:
            raise ValueError(f"a delivery channel needs capacity >= 1, got {capacity}")
        self._capacity = capacity
        #: The driver waits for room (and was not woken since).
        self._sender_parked = False
        #: Deliveries and read batches, in order; ``_queued`` counts the deliveries they hold.
        self._buffer: deque[Delivery | ReadBatch] = deque()
        self._queued = 0
        self._generation = 0
        self._send_waiters = ParkingLot()
        self._receive_waiters = ParkingLot()
        self._idle_waiters = ParkingLot()
        self._closed = False
        self._interrupted = False
        self._outstanding = 0
        self._on_change = on_change
        #: Told of each delivery the channel lets go of unsettled (purged, abandoned).
        self._on_unsettled = on_unsettled
        self._send_share = FairShare()
        self._receive_share = FairShare()
        #: Deliveries purged because a seek made them stale (for stats and tests).
        self.stale_count = 0
        #: The batch, and the index in it, of the message ``take_payload`` took last.
        self.taken_from: ReadBatch | None = None
        self.taken_index = 0

    # ---- state -------------------------------------------------------------------------------

    @property
    def generation(self) -> int:
        return self._generation

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def queued(self) -> int:
        return self._queued

    @property
    def outstanding(self) -> int:
        """Deliveries sent and not yet finished: queued plus in the dispatcher's hands."""
        return self._outstanding

    @property
    def interrupted(self) -> bool:
        return self._interrupted

    @property
    def closed(self) -> bool:
        return self._closed

    def is_current(self, delivery: Delivery) -> bool:
        """False once a seek has moved the reader past the position ``delivery`` came from."""
        return delivery.generation == self._generation

    # ---- driver side -------------------------------------------------------------------------

    async def send_from(self, batch: Sequence[Delivery] | ReadBatch, start: int) -> int:
        """Queue ``batch[start:]``, as much as there is room for, waiting for room if none.

        Returns the index after the last delivery queued: ``start`` itself means the driver was
        interrupted by a seek request and nothing was queued. A cancel point; a schedule point
        when it waits and otherwise now and then (see ``_schedule``). Raises
        ``trio.ClosedResourceError`` if the channel is closed.
        """
        await checkpoint_if_cancelled()
        parked = False
        while True:
            if self._closed:
                raise trio.ClosedResourceError("the delivery channel is closed")
            if self._interrupted:
                return start
            room = self._capacity - self._queued
            if room > 0:
                break
            self._sender_parked = True
            try:
                await self._send_waiters.park()
            finally:
                self._sender_parked = False
            parked = True
        end = min(len(batch), start + room)
        generation = self._generation
        if type(batch) is ReadBatch:
            # One item for the whole read (or the part there is room for).
            item = batch if start == 0 and end == len(batch) else batch.part(start, end)
            item.generation = generation
            self._buffer.append(item)
        else:
            for index in range(start, end):
                batch[index].generation = generation
            self._buffer.extend(batch[start:end])
        self._queued += end - start
        self._outstanding += end - start
        if self._receive_waiters:
            self._receive_waiters.unpark(count=end - start)
        if parked:
            self._send_share.reset()
        else:
            await self._send_share.after_progress()
        return end

    def grow(self, capacity: int) -> None:
        """Make room for at least ``capacity`` deliveries (never shrinks: what is queued stays).

        Used once the source has opened and knows how much one read returns."""
        if capacity > self._capacity:
            self._capacity = capacity
            self._send_waiters.unpark_all()

    def interrupt(self) -> None:
        """Wake the driver wherever it waits here; ``send`` returns False until cleared."""
        self._interrupted = True
        self._send_waiters.unpark_all()
        self._idle_waiters.unpark_all()

    def clear_interrupt(self) -> None:
        self._interrupted = False

    def advance_generation(self) -> int:
        """Open a new generation: every queued delivery is stale and purged. Returns how many."""
        self._generation += 1
        purged = self._queued
        self._let_go(Unsettled.PURGED)
        self.stale_count += purged
        if self._send_waiters:
            self._send_waiters.unpark_all()
        self._release(purged)
        return purged

    def hand_back(self) -> int:
        """Let go of every queued delivery, as abandoned (a graceful stop of a source that
        hands them back rather than draining them). Returns how many."""
        count = self._queued
        if count:
            self._let_go(Unsettled.ABANDONED)
            if self._send_waiters:
                self._send_waiters.unpark_all()
            self._release(count)
        return count

    def close(self) -> None:
        """No more deliveries: receivers drain what is queued, then get ``trio.EndOfChannel``."""
        self._closed = True
        self._receive_waiters.unpark_all()
        self._send_waiters.unpark_all()

    async def wait_idle_or_interrupt(self) -> None:
        """Wait until nothing is outstanding or a seek interrupts (checks first, then parks)."""
        await checkpoint_if_cancelled()
        if self._outstanding == 0 or self._interrupted:
            await cancel_shielded_checkpoint()
            return
        while self._outstanding and not self._interrupted:
            await self._idle_waiters.park()

    # ---- dispatcher side ---------------------------------------------------------------------

    async def receive(self) -> Delivery:
        """The next queued delivery; ``trio.EndOfChannel`` once closed and drained.

        A cancel point; a schedule point when it waits and otherwise now and then: a worker
        draining a buffer of quick handlers would else pass through the scheduler once per
        message, which is most of the cost of a no-op delivery (see ``_schedule``).
        """
        await checkpoint_if_cancelled()
        if self._buffer:
            delivery = self._pop()
            await self._receive_share.after_progress()
            return delivery
        self._receive_share.reset()
        while not self._buffer:
            if self._closed:
                await cancel_shielded_checkpoint()
                raise trio.EndOfChannel
            await self._receive_waiters.park()
        return self._pop()

    async def wait_queued(self) -> None:
        """Return once something is queued, taking nothing; ``trio.EndOfChannel`` once closed
        and drained. A cancel point, and a schedule point as :meth:`receive` is (a worker that
        takes a run with :meth:`take_payload` and :meth:`receive_nowait` waits here)."""
        await checkpoint_if_cancelled()
        if self._buffer:
            await self._receive_share.after_progress()
            return
        self._receive_share.reset()
        while not self._buffer:
            if self._closed:
                await cancel_shielded_checkpoint()
                raise trio.EndOfChannel
            await self._receive_waiters.park()

    def _pop(self) -> Delivery:
        """Take the next delivery off the buffer (which holds one): made from the batch at its
        head, or queued as it is."""
        buffer = self._buffer
        head = buffer[0]
        if type(head) is ReadBatch:
            delivery = head.take()
            if head.next == head.end:
                buffer.popleft()
        else:
            buffer.popleft()
            delivery = head  # type: ignore[assignment]
        self._queued -= 1
        if self._sender_parked:
            self._sender_parked = False  # woken once, not once per delivery taken meanwhile
            self._send_waiters.unpark()
        return delivery

    def take_payload(self) -> bytes | None:
        """The payload of the next queued message, taken, if it needs nothing else: the head of
        the buffer is a :class:`~.delivery.ReadBatch` whose next message would be a first
        attempt without headers. None otherwise, taking nothing (:meth:`receive_nowait` then
        takes it as a delivery). Not a checkpoint.

        The message is the caller's from then on, as a received delivery is; if the caller needs
        its delivery after all (a failure, a reply), ``taken_from.made(taken_index)``, read
        before anything else is taken, makes it."""
        buffer = self._buffer
        if not buffer:
            return None
        head = buffer[0]
        if type(head) is not ReadBatch:
            return None
        index = head.next
        payload: bytes = head.items[index][head.payload_at]
        if payload.startswith(head.special):
            return None
        head.next = index + 1
        if index + 1 == head.end:
            buffer.popleft()
        self.taken_from = head
        self.taken_index = index
        self._queued -= 1
        if self._sender_parked:
            self._sender_parked = False  # woken once, not once per delivery taken meanwhile
            self._send_waiters.unpark()
        return payload

    def receive_nowait(self) -> Delivery:
        """The next queued delivery without waiting: ``trio.WouldBlock`` if none is queued,
        ``trio.EndOfChannel`` once closed and drained. Not a checkpoint (a worker taking a run
        of deliveries passes one per run)."""
        if self._buffer:
            return self._pop()
        if self._closed:
            raise trio.EndOfChannel
        raise trio.WouldBlock

    def abandon_rest(self) -> int:
        """Forget every delivery still counted (the subscription was cancelled): how many.

        Those still queued are reported abandoned here; those in the dispatcher's hands were
        reported by the dispatcher as it was cancelled."""
        self._let_go(Unsettled.ABANDONED)
        left = self._outstanding
        self._release(left)
        return left

    def _let_go(self, why: Unsettled) -> None:
        buffer, self._buffer = self._buffer, deque()
        self._queued = 0
        if self._on_unsettled is not None:
            for item in buffer:
                if type(item) is ReadBatch:
                    for delivery in item:  # what is left of it, made deliveries to report
                        self._on_unsettled(delivery, why)
                else:
                    self._on_unsettled(item, why)  # type: ignore[arg-type]

    def finished(self, delivery: Delivery | None = None) -> None:
        """The dispatcher is done with ``delivery`` (or with a message taken as its payload
        alone, ``take_payload``): settled, found stale, or abandoned."""
        # _release(1), in line: once per delivery.
        self._outstanding -= 1
        if self._outstanding == 0:
            self._idle_waiters.unpark_all()
        if self._on_change is not None:
            self._on_change()

    def _release(self, count: int) -> None:
        if not count:
            return
        self._outstanding -= count
        if self._outstanding == 0:
            self._idle_waiters.unpark_all()
        if self._on_change is not None:
            self._on_change()
