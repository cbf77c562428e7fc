"""Handling a batch: one handler call for a list of deliveries, one verdict for each.

A batch collected by a worker (:mod:`._workers`) goes through the middlewares' ``handle``
hooks (each delivery its own call record), then loses what needs no handler: deliveries made
stale by a seek, retry copies for another subscription, deliveries already tried
``max_attempts`` times, payloads that cannot be decoded. The rest is counted as one run each
(on a source that counts runs), handed to the handler as one list (dependencies solved once for
the batch), and the handler's answer, one outcome for all or one per message, is carried out
for each delivery by :class:`~._verdicts.Verdicts`.

Cancelled, every delivery of the batch not yet settled (or delayed, or reported stale) is
reported abandoned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

from ._verdicts import ACK, Next, Verdicts, handler_call
from .codec import DecodeError
from .context import Context
from .delivery import Delivery
from .depends import DependencyScope
from .errors import BaseExceptionRaised
from .outcome import Outcome, OutcomeKind, ack
from .reporting import describe
from .transport import Unsettled

if TYPE_CHECKING:
    from .middleware import HandlerCall
    from .subscription import SubscriptionRunner

__all__ = ["Batches"]


class _Ends:
    """What became of a batch's deliveries so far: the rest were abandoned (not ended) and
    are finished in the channel unless a delayed retry owns them."""

    __slots__ = ("delayed", "ended")

    def __init__(self) -> None:
        #: Settled, delayed or reported unsettled.
        self.ended: set[int] = set()
        #: Owned by a delayed retry: the timer finishes them.
        self.delayed: set[int] = set()

    def add(self, delivery: Delivery, next_: Next = Next.DONE) -> None:
        if next_ is Next.DELAYED:
            self.delayed.add(id(delivery))
        self.ended.add(id(delivery))


class Batches:
    """Handles the batches of one subscription (see the module docstring)."""

    def __init__(
        self,
        runner: SubscriptionRunner,
        verdicts: Verdicts,
        calls: dict[int, HandlerCall],
        escaped: Callable[[BaseException], BaseExceptionRaised | None],
    ) -> None:
        self._runner = runner
        self._handler = runner.subscription.handler
        self._policy = runner.subscription.options.policy
        self._channel = runner.channel
        self._log = runner.logger
        self._hooks = runner.handle_hooks
        self._verdicts = verdicts
        self._calls = calls
        self._escaped = escaped

    async def handle(self, batch: list[Delivery]) -> None:
        """Handle ``batch`` inside the middlewares' ``handle`` hooks, one call per delivery."""
        if not self._hooks:
            await self._handle_scoped(batch)
            return
        calls = self._calls
        try:
            async with AsyncExitStack() as stack:
                for delivery in batch:  # each delivery of the batch has its own call
                    call = calls[id(delivery)] = handler_call(self._runner, delivery)
                    for hook in self._hooks:
                        await stack.enter_async_context(hook.handle(call))
                await self._handle_scoped(batch)
                for delivery in batch:
                    found = calls.get(id(delivery))
                    if found is not None:
                        found.settled = found.verdict is not None
        finally:
            for delivery in batch:
                calls.pop(id(delivery), None)

    async def _handle_scoped(self, batch: list[Delivery]) -> None:
        if self._handler.dependencies is None:
            await self._handle(batch, None)
            return
        # Solved once for the batch; cleaned up once every delivery of it is settled.
        scope = DependencyScope()
        try:
            await self._handle(batch, scope)
        except BaseException as exc:
            await scope.aclose(exc, self._log, self._runner.label)
            raise
        await scope.aclose(scope.error, self._log, self._runner.label)

    async def _handle(self, batch: list[Delivery], scope: DependencyScope | None) -> None:
        ends = _Ends()
        verdicts = self._verdicts
        try:
            current = await self._current(batch, ends)
            deliveries, messages = await self._decoded(current, ends)
            if not deliveries:
                return
            await self._count_runs(deliveries)
            outcomes, error = await self._call(deliveries, messages, scope)
            for delivery, message, outcome in zip(deliveries, messages, outcomes, strict=True):
                if outcome.kind is OutcomeKind.ACK:
                    try:
                        await verdicts.answer_ack(delivery)
                    except Exception as exc:  # noqa: BLE001 - as a failing publish: the policy
                        outcome, error = self._policy.on_exception(delivery), exc
                ends.add(delivery, await verdicts.conclude(delivery, message, outcome, error))
        finally:
            runner, channel = self._runner, self._channel
            for delivery in batch:
                if id(delivery) not in ends.ended:
                    runner.unsettled(delivery, Unsettled.ABANDONED)
                if id(delivery) not in ends.delayed:
                    channel.finished(delivery)

    async def _current(self, batch: list[Delivery], ends: _Ends) -> list[Delivery]:
        """The deliveries of ``batch`` for its handler; the others are ended here."""
        runner, verdicts = self._runner, self._verdicts
        current = []
        for delivery in batch:
            if not self._channel.is_current(delivery):
                runner.unsettled(delivery, Unsettled.STALE)
                ends.add(delivery)
            elif verdicts.for_another(delivery):
                await runner.settle(delivery, ACK)
                ends.add(delivery)
            elif delivery.attempt > self._policy.max_attempts:
                ends.add(delivery, await verdicts.spent(delivery))
            else:
                current.append(delivery)
        return current

    async def _decoded(
        self, current: list[Delivery], ends: _Ends
    ) -> tuple[list[Delivery], list[Any]]:
        """The deliveries whose payloads decode, and their messages; the others run the decode
        (or, when a payload type's constructor raised, the failure) policy here."""
        verdicts = self._verdicts
        decode = self._handler.decode
        decoded: list[tuple[Delivery, Any]] = []
        for delivery in current:
            try:
                decoded.append((delivery, decode(delivery.payload)))
            except DecodeError as exc:
                ends.add(delivery, await verdicts.undecodable(delivery, exc))
            except Exception as exc:  # noqa: BLE001 - one bad message fails alone
                ends.add(delivery, await verdicts.failure(delivery, None, exc, called=False))
        # Settling undecodable ones may have yielded: a seek may have made others stale.
        deliveries, messages = [], []
        for delivery, message in decoded:
            if self._channel.is_current(delivery):
                deliveries.append(delivery)
                messages.append(message)
            else:
                self._runner.unsettled(delivery, Unsettled.STALE)
                ends.add(delivery)
        return deliveries, messages

    async def _count_runs(self, deliveries: list[Delivery]) -> None:
        source = self._runner.source
        if source.counts_runs:  # one run of the batch handler is an attempt of each
            for delivery in deliveries:
                if not source.record_run(delivery):
                    await source.attempt_started(delivery)

    async def _call(
        self, deliveries: list[Delivery], messages: list[Any], scope: DependencyScope | None
    ) -> tuple[list[Outcome], BaseException | None]:
        """The handler's outcome for each delivery, and the error it raised, if it did (every
        outcome is then the failure policy's)."""
        handler = self._handler
        contexts = [Context(self._runner, d) for d in deliveries] if handler.needs_context else None
        try:
            if handler.dependencies is not None:
                assert scope is not None
                args = [
                    messages,
                    *await handler.dependencies.solve(None, contexts, messages, scope),
                ]
            else:
                args = [messages, contexts] if handler.extractors else [messages]
            result = await handler.fn(*args)
            return batch_outcomes(result, len(deliveries)), None
        except Exception as exc:  # noqa: BLE001 - a failing handler runs the failure policy
            if scope is not None:
                scope.error = exc
            self._log_failure(deliveries, exc)
            return [self._policy.on_exception(d) for d in deliveries], exc
        except BaseException as exc:
            if (stop := self._escaped(exc)) is None:
                raise
            raise stop from exc

    def _log_failure(self, deliveries: list[Delivery], exc: Exception) -> None:
        """One line for the batch: an ERROR with the traceback when it was the last attempt of
        any of its deliveries, else a WARNING (its traceback at DEBUG)."""
        label = self._runner.label
        last = sum(d.attempt >= self._policy.max_attempts for d in deliveries)
        if last:
            self._log.error(
                "%s: batch handler failed on %d messages, the last attempt of %d: %s",
                label,
                len(deliveries),
                last,
                describe(exc),
                exc_info=exc,
            )
        else:
            self._log.warning(
                "%s: batch handler failed on %d messages: %s",
                label,
                len(deliveries),
                describe(exc),
            )
            self._log.debug("%s: the traceback", label, exc_info=exc)


def batch_outcomes(result: Any, size: int) -> list[Outcome]:
    """A batch handler's answer as one outcome per message; a malformed one raises TypeError
    (and runs the failure policy)."""
    if result is None:
        return [ack()] * size
    if isinstance(result, Outcome):
        return [result] * size
    if isinstance(result, Sequence) and not isinstance(result, str | bytes):
        if len(result) != size:
            raise TypeError(f"a batch handler returned {len(result)} outcomes for {size} messages")
        outcomes = []
        for item in result:
            if item is None:
                outcomes.append(ack())
            elif isinstance(item, Outcome):
                outcomes.append(item)
            else:
                raise TypeError(f"a batch handler returned {item!r} where an outcome belongs")
        return outcomes
    raise TypeError(
        f"a batch handler returns None, an outcome, or one outcome per message; got {result!r}"
    )
