"""The subscription driver: the one task that reads from a subscription's transport.

It owns the ``SubscriptionSource``: it alone calls ``read`` and ``seek``, so a seek never races
a read. Handlers ask for seeks through ``Seeker``; requests travel on a bounded memory channel
and wake the driver wherever it waits (inside ``read``, sending into a full delivery channel, or
waiting for a finished replay to go idle). Each seek runs to completion in a shielded scope; one
that moved the reader opens a new generation before the requester hears back, which purges every
queued delivery read at the old position.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import cast

import trio

from ._channel import DeliveryChannel
from .delivery import Delivery
from .errors import UnsupportedError
from .host import SubscriptionHost
from .positions import Position
from .transport import SeekRefused, SourceFault, SubscriptionSource, Unsettled

__all__ = ["Seeker", "SubscriptionDriver"]

#: Seek requests waiting for the driver; each requester waits for its answer, so few queue up.
_SEEK_QUEUE = 16
#: Pause after a read that raised ``SourceFault``: doubling from the first to the last while
#: reads keep failing, so a failing source is retried promptly but never in a busy loop.
_FAULT_PAUSE_FIRST = 0.001
_FAULT_PAUSE_MAX = 1.0
#: What ``SubscriptionDriver._reads`` returns when the subscription ends.
_ENDED = object()


class _SeekRequest:
    __slots__ = ("done", "error", "position")

    def __init__(self, position: Position) -> None:
        self.position = position
        self.done = trio.Event()
        self.error: BaseException | None = None

    def answer(self, error: BaseException | None = None) -> None:
        self.error = error
        self.done.set()


class Seeker:
    """Moves a subscription's reader; reach it as ``ctx.seeker`` inside a handler."""

    __slots__ = ("_driver",)

    def __init__(self, driver: SubscriptionDriver) -> None:
        self._driver = driver

    @property
    def generation(self) -> int:
        """Advances each time a seek moves the reader."""
        return self._driver.channel.generation

    async def seek(self, position: Position) -> None:
        """Move the reader to ``position`` and return once it is there.

        Nothing read at the old position reaches a handler after this returns. Raises
        ``SeekRefused`` when the transport refuses (e.g. a sequence past the next one the stream
        will write): a replay then stays where it was; a live subscription ends. After the
        subscription has stopped, every seek is refused.
        """
        await self._driver.request_seek(position)


class SubscriptionDriver:
    def __init__(
        self,
        source: SubscriptionSource,
        channel: DeliveryChannel,
        *,
        label: str,
        logger: logging.Logger,
    ) -> None:
        self.source = source
        self.channel = channel
        self.label = label
        self._log = logger
        self._seek_send, self._seek_receive = trio.open_memory_channel[_SeekRequest](_SEEK_QUEUE)
        self._read_scope: trio.CancelScope | None = None
        #: Shutdown began (``stop``) or the driver ended: every seek is refused from then on.
        self._stopped = False
        self.seeker = Seeker(self)
        #: Deliveries read but not yet in the channel (the test harness counts them as busy).
        self.holding = 0
        #: Where faults are reported; the runner sets it when it opens the source.
        self.host: SubscriptionHost | None = None
        #: The error a read raised that ended the driver (a corrupt file, a lost key): the
        #: runner raises it once the deliveries read before it have been handled.
        self.failure: Exception | None = None
        #: The kinds of the faults reads raised since the last read that succeeded.
        self._read_faults: dict[str, None] = {}
        self._fault_pause = _FAULT_PAUSE_FIRST

    # ---- requests from handlers --------------------------------------------------------------

    async def request_seek(self, position: Position) -> None:
        if not self.source.seekable:
            raise UnsupportedError(f"subscription {self.label!r} reads a source that cannot seek")
        if not isinstance(position, Position):
            raise TypeError(f"seek() takes a Position, not {type(position).__name__}")
        if self._stopped:
            raise self._refusal()
        request = _SeekRequest(position)
        try:
            await self._seek_send.send(request)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            raise self._refusal() from None
        if self.stopping:
            # Shutdown began while this request waited for room in the queue.
            request.answer(self._refusal())
        self._wake()
        await request.done.wait()
        if request.error is not None:
            raise request.error

    def _wake(self) -> None:
        self.channel.interrupt()
        if self._read_scope is not None:
            self._read_scope.cancel()

    @property
    def stopping(self) -> bool:
        """Shutdown began or the driver ended: seeks are refused."""
        return self._stopped

    def stop(self) -> None:
        """Shutdown began: refuse every seek from now on, and the ones still waiting.

        A seek the driver is carrying out completes and is answered; nothing else moves the
        reader after this, so a handler looping on ``seek`` cannot hold up the drain.
        """
        self._stopped = True
        self._refuse_queued_seeks(self._refusal())
        self._wake()

    def _refusal(self) -> SeekRefused:
        return SeekRefused(f"subscription {self.label!r} has stopped reading; seek refused")

    # ---- the driver task ---------------------------------------------------------------------

    async def run(self) -> None:
        """Read until the source ends (and nothing is in flight) or the task is cancelled.

        A read that raises (anything but ``SourceFault``, which is retried) ends the reading
        without raising here: the error is kept in :attr:`failure` and the channel closes as at
        the end of the source, so the deliveries read before it are still handled and settled.
        The runner raises the error once they have been. Cancellation is never caught.
        """
        try:
            await self._read_loop()
        except Exception as exc:  # noqa: BLE001 - kept, and raised by the runner after the drain
            self.failure = exc
            self._log.debug("%s: reading failed, handling what was read first", self.label)
        finally:
            self._stopped = True
            self.channel.close()
            self._refuse_queued_seeks(self._refusal())
            self._seek_receive.close()

    async def _read_loop(self) -> None:
        # One cancel scope serves every read until a seek request cancels one: entering and
        # leaving a scope per read costs as much as the rest of a read at a live tip. Only a
        # read is ever cancelled through it (``_read_scope`` is set only around ``read``).
        while True:
            outcome: object = None
            with trio.CancelScope() as scope:
                outcome = await self._reads(scope)
            if scope.cancelled_caught:
                continue  # woken by a seek request: serve it at the top
            if outcome is _ENDED:
                return
            # A seek request came while the read was returning: what it returned goes on,
            # outside the cancelled scope, as if the read had used a scope of its own.
            if isinstance(outcome, SourceFault):
                await self._read_failed(outcome)
            elif not await self._took(cast("Sequence[Delivery] | None", outcome)):
                return

    async def _reads(self, scope: trio.CancelScope) -> object:
        """Read and queue inside ``scope`` until the subscription ends (``_ENDED``) or a seek
        request cancels ``scope`` during a read: then what that read returned (its batch or
        the ``SourceFault`` it raised), or the read's cancellation propagates to ``scope``."""
        source = self.source
        channel = self.channel
        while True:
            if channel.interrupted and not await self._serve_seeks():
                return _ENDED
            try:
                batch: Sequence[Delivery] | None = source.poll()
                if not batch:
                    self._read_scope = scope
                    try:
                        batch = await source.read()
                    finally:
                        self._read_scope = None
            except SourceFault as fault:
                if scope.cancel_called:
                    return fault
                await self._read_failed(fault)
                continue
            if scope.cancel_called:
                return batch
            if not await self._took(batch):
                return _ENDED

    async def _took(self, batch: Sequence[Delivery] | None) -> bool:
        """What a read returned goes to the channel (None: the source ended, and the driver
        waits for what is in flight). False if the subscription must end."""
        if self._read_faults:
            self._read_recovered()
        if batch is None:
            channel = self.channel
            if channel.outstanding or channel.interrupted:
                await channel.wait_idle_or_interrupt()
                return True  # a seek or a retry may give the source more to read
            # Ended, and no handler is left that could seek or retry. Poll once more,
            # synchronously: a retry settled while ``read`` was returning is not lost.
            batch = self.source.poll()
            if not batch:
                return False
        return await self._queue(batch)

    async def _queue(self, batch: Sequence[Delivery]) -> bool:
        """Queue the deliveries of one read into the channel, serving the seeks requested
        while it waits for room. False if the subscription must end (a refused seek of a live
        one). Cancelled, the rest of the read is reported abandoned to the source."""
        channel = self.channel
        generation = channel.generation
        sent = 0
        self.holding = len(batch)
        try:
            while sent < len(batch):
                queued = await channel.send_from(batch, sent)
                if queued == sent:  # interrupted by a seek request
                    if not await self._serve_seeks():
                        return False
                    if channel.generation != generation:
                        break  # the rest of this read is stale
                sent = queued
                self.holding = len(batch) - sent
        finally:
            self.holding = 0
            if sent < len(batch):
                # The rest of this read never reaches the channel: a seek made it stale,
                # or the driver was cancelled (shutdown) while it waited for room.
                why = Unsettled.STALE if channel.generation != generation else None
                for delivery in batch[sent:]:
                    self.source.unsettled(delivery, why or Unsettled.ABANDONED)
        return True

    async def _read_failed(self, fault: SourceFault) -> None:
        """Report a fault the source raised from a read, then pause before reading again (a
        seek request or a stop ends the pause early)."""
        self._read_faults[fault.kind] = None
        if self.host is not None:
            self.host.report_fault(fault.kind, fault.message, error=fault)
        else:
            self._log.warning("%s: fault %r: %s", self.label, fault.kind, fault.message)
        pause, self._fault_pause = self._fault_pause, min(self._fault_pause * 2, _FAULT_PAUSE_MAX)
        with trio.move_on_after(pause) as scope:
            self._read_scope = scope
            try:
                await trio.sleep_forever()
            finally:
                self._read_scope = None

    def _read_recovered(self) -> None:
        kinds, self._read_faults = self._read_faults, {}
        self._fault_pause = _FAULT_PAUSE_FIRST
        if self.host is not None:
            for kind in kinds:  # every kind a failing read raised clears with the first good one
                self.host.clear_fault(kind)

    async def _serve_seeks(self) -> bool:
        """Run the seeks queued now to completion. False if the subscription must end.

        Only the requests already queued are served: a handler that asks again as soon as it
        hears back waits for the next round, so a stream of seeks cannot starve the reads or
        keep a cancelled driver from stopping (the driver checks for cancellation in between).
        """
        self.channel.clear_interrupt()
        for _ in range(self._seek_receive.statistics().current_buffer_used):
            try:
                request = self._seek_receive.receive_nowait()
            except trio.WouldBlock:
                break
            if self._stopped:
                request.answer(self._refusal())
                continue
            with trio.CancelScope(shield=True):
                try:
                    await self.source.seek(request.position)
                except SeekRefused as refusal:
                    request.answer(refusal)
                    if self.source.live:
                        # It ends here: what it had read at the old position is not delivered.
                        purged = self.channel.advance_generation()
                        self._log.warning(
                            "%s: seek refused, live subscription ends (%d queued deliveries "
                            "dropped): %s",
                            self.label,
                            purged,
                            refusal,
                        )
                        return False
                    self._log.info(
                        "%s: seek refused, staying where it was: %s", self.label, refusal
                    )
                    continue
                except BaseException as exc:
                    request.answer(SeekRefused(f"{self.label}: seek failed: {exc!r}"))
                    raise
            purged = self.channel.advance_generation()
            self._log.debug(
                "%s: seek to %r done, %d queued deliveries dropped",
                self.label,
                request.position,
                purged,
            )
            request.answer()
        await trio.lowlevel.checkpoint_if_cancelled()
        return True

    def _refuse_queued_seeks(self, refusal: SeekRefused) -> None:
        while True:
            try:
                request = self._seek_receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                break
            request.answer(refusal)
