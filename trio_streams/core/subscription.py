"""``SubscriptionRunner``: one mounted subscription at run time — driver, dispatcher, timers.

Its tasks live in one nursery, owned by the app:

- the driver reads from the transport into the bounded delivery channel (back-pressure: it stops
  reading while the channel is full);
- the dispatcher runs the handler on what the channel holds;
- the delayed-retry timer fires ``retry_after`` retries that the transport does not keep.

Stopping is graceful by default: ``stop_reading`` ends the driver, the dispatcher drains what was
already read, due and pending delayed retries fire at once, and only then is the transport's
reader closed (a pipeline window flushes there). ``abandon`` cancels whatever is left: a delivery
abandoned without an outcome is never settled, so a durable transport delivers it again.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import trio

from ._channel import DeliveryChannel
from ._delayed import DelayedRetries
from .delivery import Delivery
from .dispatch import Dispatcher, HandledMessage
from .driver import Seeker, SubscriptionDriver
from .host import Fault, SubscriptionHost
from .middleware import Middleware, ack_counters, handle_hooks, record_observers
from .outcome import Outcome, OutcomeKind, drop, retry
from .pipeline import Pipeline
from .routing import Subscription
from .transport import DeadLetter, SourceFault, SubscriptionSource, Transport, Unsettled

if TYPE_CHECKING:
    from .app import State
    from .broker import Broker

__all__ = ["SubscriptionRunner", "SubscriptionState", "SubscriptionStats"]

#: How long a reader may take to close (flush) once its subscription has stopped.
_CLOSE_TIMEOUT = 10.0


class SubscriptionState(enum.Enum):
    CREATED = "created"
    RUNNING = "running"
    DRAINING = "draining"
    ENDED = "ended"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class SubscriptionStats:
    """A snapshot of one subscription, for health endpoints, metrics and tests."""

    name: str
    state: SubscriptionState
    #: Deliveries waiting in the bounded channel (never more than ``capacity``).
    queued: int
    capacity: int
    #: Deliveries read and not yet settled: queued, in a handler, or waiting out a delay.
    outstanding: int
    #: Read from the transport, not yet queued: the rest of the driver's current read.
    held: int
    #: Retries waiting out ``retry_after`` in this process.
    delayed: int
    #: Messages the transport could hand out right now without waiting (where it can tell).
    unread: int
    #: Deliveries dropped unhandled because a seek made them stale.
    stale: int
    generation: int
    #: Faults the source reported (or raised) and recovered from, since it started.
    faults: int = 0
    #: The kinds of the faults that last now (the subscription is degraded while any does).
    degraded: tuple[str, ...] = ()
    #: How far behind the transport's tip, where it can tell: ``(unit, amount)``, the unit
    #: ``"bytes"`` (a stream file) or ``"messages"`` (a Redis group's lag); None otherwise.
    lag: tuple[str, float] | None = None
    #: Messages deleted at the server while pending, so never handled (a Redis stream entry
    #: ``XDEL``ed or trimmed while in a pending list), since the subscription opened.
    deleted_while_pending: int = 0


class SubscriptionRunner:
    def __init__(
        self,
        subscription: Subscription,
        transport: Transport,
        *,
        app_state: State,
        logger: logging.Logger,
        on_change: Callable[[], None] | None = None,
        observers: tuple[Callable[[HandledMessage], None], ...] = (),
        on_fault: Callable[[Fault], None] | None = None,
        app_name: str = "",
        retry_target: str | None = None,
        middlewares: tuple[Middleware, ...] = (),
        broker_name: str = "",
    ) -> None:
        self.subscription = subscription
        #: The middlewares that wrap each delivery's handling, outermost first.
        self.handle_hooks = handle_hooks(middlewares)
        self.broker_name = broker_name
        self.label = subscription.name
        self._retry_target = retry_target or f"{app_name}/{subscription.name}"
        self.transport = transport
        self.app_state = app_state
        self.logger = logger
        self.observers = observers
        #: A plain ack is counted by these, bound to this subscription once, and told to the
        #: observers that need a record (the other observers count it themselves).
        self.ack_counters = ack_counters(middlewares, subscription.name)
        self.ack_observers = record_observers(observers, middlewares)
        self._on_change = on_change
        self._on_fault = on_fault
        #: The source's view of this subscription; set when ``run`` opens the source.
        self.host: SubscriptionHost | None = None
        self.source: SubscriptionSource = transport.open_subscription(
            subscription.source, subscription.transport_options, label=self.label
        )
        self.channel = DeliveryChannel(
            subscription.options.capacity_for(self.source.read_count),
            on_change=on_change,
            on_unsettled=self.unsettled,
        )
        self.driver = SubscriptionDriver(self.source, self.channel, label=self.label, logger=logger)
        self.delayed = DelayedRetries(
            self._fire_delayed,
            capacity=subscription.options.max_delayed,
            logger=logger,
            on_change=on_change,
            on_abandoned=lambda delivery: self.unsettled(delivery, Unsettled.ABANDONED),
        )
        self.state = SubscriptionState.CREATED
        #: Its dispatcher, once it runs.
        self.dispatcher: Dispatcher | None = None
        #: True once its tasks are running (a failure after this fails the app, not its start).
        self.started = False
        self.error: BaseException | None = None
        self.finished = trio.Event()
        self._read_scope = trio.CancelScope()
        self._scope = trio.CancelScope()
        #: Set when the subscription stops reading: waits that only order needs end early.
        self.stopping = trio.Event()
        #: Deliveries an ordered lane holds while a ``retry_after`` delay passes: id → deadline.
        self.lane_delays: dict[int, float] = {}
        #: The kinds of the faults settles (and dead letters) raised, until one succeeds.
        self._settle_failing: dict[str, None] = {}

    @property
    def broker(self) -> Broker:
        return self.subscription.broker

    @property
    def retry_target(self) -> str:
        """What this subscription's retry copies name as their target (RETRY_TARGET_HEADER):
        ``<app>/<subscription>``, or what the source made it at open (a consumer group's)."""
        return self._retry_target if self.host is None else self.host.retry_target

    @property
    def seeker(self) -> Seeker | None:
        """The handlers' seek handle (``ctx.seeker``), or None if the source cannot seek."""
        return self.driver.seeker if self.source.seekable else None

    def pipeline_for(self, delivery: Delivery) -> Pipeline | None:
        """``delivery``'s pipeline-window segment (``ctx.pipeline``), or None without a window."""
        return self.source.pipeline(delivery)

    def stats(self) -> SubscriptionStats:
        channel = self.channel
        return SubscriptionStats(
            name=self.label,
            state=self.state,
            queued=channel.queued,
            capacity=channel.capacity,
            outstanding=channel.outstanding,
            held=self.driver.holding,
            delayed=len(self.delayed) + len(self.lane_delays),
            unread=self.source.unread(),
            stale=channel.stale_count,
            generation=channel.generation,
            faults=0 if self.host is None else self.host.count,
            degraded=() if self.host is None else tuple(self.host.active),
            lag=self.source.lag(),
            deleted_while_pending=self.source.deleted_while_pending(),
        )

    def quiescent(self) -> bool:
        """Nothing to read now, nothing in flight, no retry due: the test harness's idea of done."""
        # Deliveries waiting out a delay count as outstanding until they fire.
        return (
            self.channel.outstanding == len(self.delayed) + len(self.lane_delays)
            and self.driver.holding == 0
            and (self.finished.is_set() or self.source.unread() == 0)
            and self.next_deadline() > trio.current_time()
        )

    def changed(self) -> None:
        """Tell whoever watches (the test harness) that something bearing on "settled" moved."""
        if self._on_change is not None:
            self._on_change()

    def next_deadline(self) -> float:
        """When the next retry waiting out a delay is due (inf if none waits)."""
        lanes = min(self.lane_delays.values(), default=float("inf"))
        return min(self.delayed.next_deadline(), lanes)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run until the source ends and everything is settled, or until stopped."""
        try:
            with self._scope:
                # The source's own tasks live here: cancelled once the dispatcher has drained,
                # before the source is closed.
                async with trio.open_nursery() as services:
                    self.host = SubscriptionHost(
                        self.label,
                        self.subscription.options,
                        services,
                        logger=self.logger,
                        on_fault=self._fault_changed,
                        retry_target=self._retry_target,
                    )
                    self.driver.host = self.host
                    await self.source.open(self.host)
                    # ``open`` may have learnt how much one read returns.
                    self.channel.grow(
                        self.subscription.options.capacity_for(self.source.read_count)
                    )
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._drive)
                        nursery.start_soon(self._dispatch)
                        nursery.start_soon(self.delayed.run)
                        self.state = SubscriptionState.RUNNING
                        self.started = True
                        task_status.started()
                    services.cancel_scope.cancel()
                if self.driver.failure is not None:
                    # The source failed: what was read before it has been handled; now fail.
                    raise self.driver.failure
            if self.state is not SubscriptionState.FAILED:
                self.state = SubscriptionState.ENDED
        except BaseException as exc:
            self.state = SubscriptionState.FAILED
            self.error = exc
            raise
        finally:
            abandoned = self.channel.abandon_rest()
            if abandoned:
                self.logger.warning(
                    "%s: %d delivery(ies) abandoned without an outcome", self.label, abandoned
                )
            try:
                with trio.move_on_after(_CLOSE_TIMEOUT, shield=True) as closing:
                    await self.close_source()
                if closing.cancelled_caught:
                    self.logger.error(
                        "%s: the reader did not close within %ss", self.label, _CLOSE_TIMEOUT
                    )
            except BaseException as exc:
                # A reader that fails to close fails the subscription (and so the app); the
                # app still learns the subscription has finished, so its shutdown goes on.
                self.state = SubscriptionState.FAILED
                self.error = self.error or exc
                raise
            finally:
                self.finished.set()
                if self._on_change is not None:
                    self._on_change()

    async def close_if_unstarted(self) -> None:
        """Close the reader of a runner whose ``run`` never began (``run`` closes its own)."""
        if not self.started and not self.finished.is_set():
            self.finished.set()
            with trio.move_on_after(_CLOSE_TIMEOUT, shield=True):
                await self.close_source()

    async def close_source(self) -> None:
        """Close the source; a ``SourceFault`` from it is reported, not raised."""
        try:
            await self.source.aclose()
        except SourceFault as fault:
            self.report(fault)

    def report(self, fault: SourceFault) -> None:
        """Report a fault the source raised (see :mod:`trio_streams.core.host`)."""
        if self.host is not None:
            self.host.report_fault(fault.kind, fault.message, error=fault)
        else:
            self.logger.warning("%s: fault %r: %s", self.label, fault.kind, fault.message)

    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        """Settle through the source; a ``SourceFault`` is reported, and clears at the next
        settle that succeeds (the transport keeps the delivery pending, to deliver it again).
        False when the settle failed so (a retry it asked for was then not written)."""
        source = self.source
        if outcome.kind is OutcomeKind.ACK and source.acks_are_noops:
            self.ended_by_noop_ack(delivery)
            return True
        delivery.ended = True
        try:
            written = await source.settle(delivery, outcome)
        except SourceFault as fault:
            self._settle_failed(fault)
            return False
        if self._settle_failing and written is not False:  # held: says nothing of the server
            self._settle_recovered()
        return True

    def ended_by_noop_ack(self, delivery: Delivery) -> None:
        """``delivery`` was acknowledged where an ack settles nothing
        (``source.acks_are_noops``): it ends as a settle ends it, without the call (and, as
        nothing was written, without clearing a fault an earlier settle raised)."""
        delivery.ended = True

    def _settle_failed(self, fault: SourceFault) -> None:
        """A settle failed: its fault is raised, or, already raised, counts one more."""
        self._settle_failing[fault.kind] = None
        if self.host is not None:
            self.host.report_fault(fault.kind, fault.message, error=fault, left=fault.left)
        else:
            self.report(fault)

    def _settle_recovered(self) -> None:
        """A settle (or a dead letter) succeeded: every fault settling raised has cleared."""
        if self._settle_failing:
            kinds, self._settle_failing = self._settle_failing, {}
            if self.host is not None:
                for kind in kinds:
                    self.host.clear_fault(kind)

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> SourceFault | None:
        """Dead-letter ``delivery``: in one step where the source can, else publish the copy
        through the transport and settle the delivery with ``drop()``. Returns the fault when
        the source could not write the letter (its message says what became of the delivery),
        None when the letter was written."""
        delivery.ended = True
        try:
            done = await self.source.dead_letter(delivery, letter)
        except SourceFault as fault:
            self._settle_failed(fault)  # the delivery stays with the transport, to deliver again
            return fault
        if done:
            self._settle_recovered()
            return None
        delivery.ended = False  # the core does it in two steps: the settle ends it
        try:
            await self.transport.publish(
                letter.destination, delivery.payload, letter.headers_for(delivery)
            )
        except (ConnectionError, TimeoutError) as exc:  # the server did not answer
            failed = SourceFault(
                "dead letter",
                f"writing the dead letter to {letter.destination!r} failed: {exc}; the message "
                "is not settled (a transport that keeps messages delivers it again)",
                left="the messages were not settled",
            )
            failed.__cause__ = exc
            self._settle_failed(failed)
            self.unsettled(delivery, Unsettled.ABANDONED)
            return failed
        self._settle_recovered()  # the letter is written
        await self.settle(delivery, drop())
        return None

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        """``delivery`` ends without a settle: tell the source (synchronously), unless it was
        already handed back (a settle cancelled halfway still counts as its end)."""
        if not delivery.ended:
            delivery.ended = True
            self.source.unsettled(delivery, why)

    def _fault_changed(self, fault: Fault) -> None:
        if self._on_fault is not None:
            self._on_fault(fault)

    async def _drive(self) -> None:
        with self._read_scope:
            await self.driver.run()
        if self.driver.failure is not None:
            self.stop_reading()  # drain what was read; ``run`` raises the failure after it
        # A cancelled read still closes the channel (driver.run's finally), so the
        # dispatcher drains what was read and ends.

    async def _dispatch(self) -> None:
        self.dispatcher = Dispatcher(self)
        await self.dispatcher.run()
        if self.state is SubscriptionState.RUNNING:
            self.state = SubscriptionState.DRAINING
        self.delayed.close()

    async def _fire_delayed(self, delivery: Delivery) -> None:
        try:
            await self.settle(delivery, retry())
        finally:
            self.channel.finished(delivery)

    def stop_reading(self) -> None:
        """Stop reading; what was read is still handled, then the subscription ends."""
        self.stopping.set()
        if self.state is SubscriptionState.RUNNING:
            self.state = SubscriptionState.DRAINING
        self.driver.stop()  # seeks are refused from now on
        self._read_scope.cancel()
        if self.source.hands_back_at_stop:
            # Not drained: another member of its group takes it at once.
            self.channel.hand_back()
        # Delayed retries fire now, so a handler that overruns the drain cannot hold them
        # back until the timeout cancels them.
        self.delayed.flush()

    def abandon(self) -> None:
        """Cancel whatever is still running: handlers, delayed retries, the reader."""
        self._scope.cancel()
