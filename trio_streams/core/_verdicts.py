"""Carrying verdicts out: outcome → failure policy → attempts cap → dead letter → settle.

The decisions are :mod:`._failure`'s, which does no I/O; this module carries them out for one
subscription. It logs each failure once (a WARNING while retries are left, an ERROR with the
traceback on the last attempt), fills in the middlewares' call record and the record observers
get (:class:`HandledMessage`), writes dead letters, hands ``retry_after`` to the subscription's
delayed-retry timer where the source keeps no durable schedule, retries in place in an ordered
lane, and settles. Every step answers what becomes of the delivery next (:class:`Next`), so the
caller knows whether the channel may count it finished.

Cancelled, a step leaves the delivery unsettled: the caller reports it abandoned.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from ._answers import NULL, Answers, is_request
from ._failure import Verdict
from .codec import DecodeError, EncodeError, encode
from .delivery import Delivery, retry_target_of
from .middleware import HandlerCall, broker_kind
from .outcome import Outcome, OutcomeKind, ack, drop, retry
from .reporting import describe
from .transport import DeadLetter, SourceFault, Unsettled

if TYPE_CHECKING:
    from .subscription import SubscriptionRunner

__all__ = ["ACK", "HandledMessage", "Next", "Unencodable", "Verdicts", "handler_call", "where"]

ACK = ack()
_ACK_VERDICT = Verdict(ACK)


class Next(enum.Enum):
    """What becomes of a delivery once a step of its handling is done."""

    #: Settled, dead-lettered, or reported unsettled: the channel counts it finished.
    DONE = "done"
    #: A delayed retry owns it now: the timer finishes it when it fires.
    DELAYED = "delayed"
    #: An ordered lane handles it again in place (its attempt was raised).
    AGAIN = "again"


class Unencodable(Exception):
    """The handler's return value cannot be encoded for its publishers (the handler ran)."""

    def __init__(self, error: EncodeError) -> None:
        super().__init__(str(error))
        self.error = error


@dataclass(slots=True)
class HandledMessage:
    """One handler call as observers (the test harness, metrics) see it: a record made for
    every delivery they watch, so it is a plain (not frozen) dataclass, cheap to build; treat
    it as read-only."""

    subscription: str
    delivery: Delivery
    #: The decoded payload, or None when it could not be decoded.
    message: Any
    #: What the handler (or the failure policy, on an exception) decided.
    outcome: Outcome
    #: What was settled after the attempts cap, and where it was dead-lettered, if anywhere.
    verdict: Verdict
    error: BaseException | None = None
    #: False when the handler was not called: the payload could not be decoded, or the delivery
    #: had already been tried ``max_attempts`` times (its verdict says what became of it).
    called: bool = True
    #: Seconds from the start of its handling (decoding included) to its verdict, before the
    #: settle; None where it is not timed (a batch).
    seconds: float | None = None


class Verdicts:
    """Carries out the verdicts of one subscription's deliveries (see the module docstring).

    ``calls`` holds the middlewares' call record of each delivery they wrap, ``starts`` when
    the handling of each delivery in hand began (None without observers): both are the
    dispatcher's, filled as it goes.
    """

    def __init__(
        self,
        runner: SubscriptionRunner,
        calls: dict[int, HandlerCall],
        starts: dict[int, float] | None,
    ) -> None:
        self._runner = runner
        self._policy = runner.subscription.options.policy
        self._publishers = runner.subscription.publishers
        self._log = runner.logger
        self._calls = calls
        self._starts = starts
        #: No observer and no middleware watches: an ack needs no verdict built.
        self._unwatched = not runner.observers and not runner.handle_hooks
        #: Replies to request deliveries (:mod:`._answers`).
        self.answers = Answers(runner, runner.logger)
        counters = runner.ack_counters
        #: The observers' record of an ack of the in-line path (``_observe_ack``): where one
        #: counter is all there is to tell, one call with its seconds.
        self.observe_ack: Callable[[Delivery, Any, float], None] = (
            _counting_acks(counters[0])
            if len(counters) == 1 and not runner.ack_observers and not runner.handle_hooks
            else self._observe_ack
        )

    def for_another(self, delivery: Delivery) -> bool:
        """A retry copy another subscription of the stream asked for: passed over unhandled
        (settled as consumed, so a durable position moves past it), and not recorded."""
        target = retry_target_of(delivery)
        return target is not None and target != self._runner.retry_target

    # ---- outcomes ----------------------------------------------------------------------------

    async def outcome_of(self, result: Any, delivery: Delivery) -> Outcome:
        """The outcome a handler's return value stands for; a value is published first, by
        every publisher of the handler (encoded once), and answers ``delivery`` if it is a
        request (so does ``None`` or ``ack()``, as ``null``). Raises :class:`Unencodable`."""
        request = is_request(delivery)
        if result is None or isinstance(result, Outcome):
            if request and (result is None or result.kind is OutcomeKind.ACK):
                await self.answers.value(delivery, NULL)
            return ACK if result is None else result
        publishers = self._publishers
        if publishers or request:
            try:
                payload = encode(result)  # once for every publisher, before any publishes
            except EncodeError as exc:
                raise Unencodable(exc) from None
            for publisher in publishers:
                await publisher.publish(payload)
            if request:
                await self.answers.value(delivery, payload)
        return ACK

    async def answer_ack(self, delivery: Delivery) -> None:
        """A batch handler acknowledged ``delivery``: a request among them is answered ``null``
        (a batch's return value is outcomes, not one value per message)."""
        if is_request(delivery):
            await self.answers.value(delivery, NULL)

    def failed(self, delivery: Delivery, exc: Exception) -> Outcome:
        """The failure policy's outcome for ``exc``, logged: a failure that will be retried is
        one WARNING line (its traceback at DEBUG); the last attempt's is an ERROR with it."""
        outcome = self._policy.on_exception(delivery)
        label, attempt, cap = self._runner.label, delivery.attempt, self._policy.max_attempts
        if attempt >= cap:
            self._log.error(
                "%s: handler failed on attempt %d of %d, the last (message %s): %s",
                label,
                attempt,
                cap,
                where(delivery),
                describe(exc),
                exc_info=exc,
            )
        else:
            self._log.warning(  # the retry is logged once it is written (``settle``)
                "%s: handler failed on attempt %d of %d (message %s): %s",
                label,
                attempt,
                cap,
                where(delivery),
                describe(exc),
            )
            self._log.debug("%s: the traceback of attempt %d", label, attempt, exc_info=exc)
        return outcome

    # ---- verdicts ----------------------------------------------------------------------------

    async def conclude(
        self,
        delivery: Delivery,
        message: Any,
        outcome: Outcome,
        error: BaseException | None,
        *,
        called: bool = True,
        ordered: bool = False,
    ) -> Next:
        """Decide and carry out what becomes of ``delivery`` after ``outcome``: observed,
        settled, delayed or (``ordered``) retried in its lane."""
        if outcome is ACK and self._unwatched:
            # The common case, without building a verdict.
            await self._runner.settle(delivery, outcome)
            return Next.DONE
        verdict = self._policy.decide(delivery, outcome)
        self.observe(delivery, message, outcome, verdict, error, called=called)
        if ordered and verdict.dead_letter is None and verdict.outcome.is_retry:
            return await self._retry_in_lane(delivery, verdict.outcome)
        # A drop the handler returned (the policy drops only a spent retry), on whichever attempt.
        reason = "dropped" if outcome.kind is OutcomeKind.DROP else "max-attempts"
        return await self.settle(delivery, verdict, error, reason=reason)

    async def failure(
        self,
        delivery: Delivery,
        message: Any,
        exc: Exception,
        *,
        called: bool = True,
        ordered: bool = False,
    ) -> Next:
        """The handler (or what builds its arguments, ``called=False``) raised ``exc``: the
        failure policy's outcome, concluded."""
        outcome = self.failed(delivery, exc)
        return await self.conclude(delivery, message, outcome, exc, called=called, ordered=ordered)

    async def result(self, delivery: Delivery, message: Any, result: Any) -> Next:
        """The handler returned ``result`` (outside an ordered lane): publish it, then
        conclude. A failing publish runs the failure policy."""
        try:
            outcome = await self.outcome_of(result, delivery)
        except Unencodable as exc:
            return await self.unencodable(delivery, message, exc.error)
        except Exception as exc:  # noqa: BLE001 - a failing publish runs the failure policy
            return await self.failure(delivery, message, exc)
        return await self.conclude(delivery, message, outcome, None)

    async def spent(self, delivery: Delivery) -> Next:
        """A delivery already tried ``max_attempts`` times (a handler that crashed the process
        never settled it, or the cap was lowered): not handled again, dead-lettered or dropped."""
        runs = delivery.attempt - 1  # the attempts made: this delivery is not one
        self._log.warning(
            "%s: message %s was tried %d times (max_attempts=%d): not handled again",
            self._runner.label,
            where(delivery),
            runs,
            self._policy.max_attempts,
        )
        verdict = Verdict(drop(), self._policy.dead_letter)
        self.observe(delivery, None, verdict.outcome, verdict, None, called=False)
        return await self.settle(delivery, verdict, attempts=runs)

    async def undecodable(self, delivery: Delivery, exc: DecodeError) -> Next:
        """Run the decode policy."""
        if exc.header is None and delivery.layout_hint is not None:
            exc = exc.with_hint(delivery.layout_hint)  # written without the transport's layout
        what = "decode" if exc.header is None else f"read header {exc.header!r} of"
        self._log.warning(
            "%s: cannot %s the message %s: %s",
            self._runner.label,
            what,
            where(delivery),
            exc.reason,
        )
        verdict = self._policy.on_undecodable()
        self.observe(delivery, None, verdict.outcome, verdict, exc, called=False)
        return await self.settle(delivery, verdict, exc, reason="undecodable")

    async def unkeyed(self, delivery: Delivery, exc: Exception) -> Next:
        """``by_key`` raised on ``delivery``'s message: no retry gives it a key, and no handler
        ran, so it is settled by the decode policy (dead letter, reason ``by-key``, else drop)
        with no attempt charged."""
        verdict = self._policy.on_undecodable()
        self._log.warning(
            "%s: by_key raised on the message %s, so the handler did not run: %s; %s",
            self._runner.label,
            where(delivery),
            describe(exc),
            "dead-lettering it" if verdict.dead_letter is not None else "dropped",
        )
        self.observe(delivery, None, verdict.outcome, verdict, exc, called=False)
        return await self.settle(
            delivery, verdict, exc, reason="by-key", attempts=delivery.attempt - 1
        )

    async def unencodable(self, delivery: Delivery, message: Any, exc: EncodeError) -> Next:
        """The handler ran, but its return value cannot be published: running it again would
        repeat its effects for the same result, so the delivery is dead-lettered at once (or
        dropped, logged as an error)."""
        verdict = self._policy.on_unencodable()
        if verdict.dead_letter is None:
            self._log.error(
                "%s: message %s dropped: the handler's return value cannot be published "
                "(%s); the handler is not run again",
                self._runner.label,
                where(delivery),
                exc,
            )
        self.observe(delivery, message, verdict.outcome, verdict, exc)
        return await self.settle(delivery, verdict, exc, reason="unencodable")

    # ---- carrying a verdict out --------------------------------------------------------------

    async def settle(
        self,
        delivery: Delivery,
        verdict: Verdict,
        error: BaseException | None = None,
        *,
        reason: str = "max-attempts",
        attempts: int | None = None,
    ) -> Next:
        """Carry out ``verdict``. ``attempts``: how many times it was tried (its attempt,
        unless it is spent: one fewer)."""
        runner = self._runner
        tried = delivery.attempt if attempts is None else attempts
        if is_request(delivery) and (
            verdict.dead_letter is not None or verdict.outcome.kind is OutcomeKind.DROP
        ):
            await self.answers.failure(delivery, error, reason=reason, attempts=tried)
        if verdict.dead_letter is not None:
            letter = DeadLetter(
                verdict.dead_letter,
                reason,
                DeadLetter.describe(error),
                tried,
                runner.label,
                time.time_ns() // 1_000_000,
            )
            refused = await runner.dead_letter(delivery, letter)
            self._log_dead_letter(delivery, letter, refused)
            return Next.DONE
        elif verdict.outcome.kind is OutcomeKind.DROP and tried >= self._policy.max_attempts:
            self._log.warning(
                "%s: message %s dropped after %d attempt(s): %s%s",
                runner.label,
                where(delivery),
                tried,
                reason,
                f" ({describe(error)})" if error is not None else "",
            )
        outcome = verdict.outcome
        if outcome.kind is OutcomeKind.RETRY_AFTER and not runner.source.durable_delay:
            await runner.delayed.schedule(delivery, outcome.delay)
            runner.source.deferred(delivery, outcome)
            self._log.debug(
                "%s: retry of message %s held in this process for %gs",
                runner.label, where(delivery), outcome.delay,
            )  # fmt: skip
            return Next.DELAYED
        settled = await runner.settle(delivery, outcome)
        if settled and outcome.is_retry:  # a failed one is the settle fault's (counted there)
            self._log.debug(
                "%s: retry of message %s written%s",
                runner.label,
                where(delivery),
                f" for {outcome.delay:g}s from now" if outcome.delay else "",
            )
        return Next.DONE

    async def _retry_in_lane(self, delivery: Delivery, outcome: Outcome) -> Next:
        """A retry in an ordered lane keeps the key's order: the lane handles the delivery again
        in place (after the delay, for ``retry_after``), and the key's later messages wait
        behind it. The attempt count is kept in memory, so a crash in between restarts it.

        Stopping cuts a delay short: the delivery is then settled as a retry copy, as every
        delayed retry is at shutdown, so nothing is lost. A seek that made it stale meanwhile
        ends it unsettled."""
        runner = self._runner
        runner.source.deferred(delivery, outcome)
        if outcome.kind is OutcomeKind.RETRY_AFTER and outcome.delay > 0:
            deadline = trio.current_time() + outcome.delay
            runner.lane_delays[id(delivery)] = deadline
            runner.changed()
            try:
                with trio.move_on_at(deadline):
                    await runner.stopping.wait()
            finally:
                del runner.lane_delays[id(delivery)]
            if runner.stopping.is_set():
                await runner.settle(delivery, retry())
                return Next.DONE
        else:
            await trio.lowlevel.checkpoint()
        if not runner.channel.is_current(delivery):
            runner.unsettled(delivery, Unsettled.STALE)
            return Next.DONE
        delivery.attempt += 1
        return Next.AGAIN

    def _log_dead_letter(
        self, delivery: Delivery, letter: DeadLetter, refused: SourceFault | None
    ) -> None:
        """One line, once the dead letter was tried: "dead-lettered" only when it was
        written; otherwise why not, and what became of the delivery (the fault's message)."""
        why = f"{letter.reason}{f' ({letter.error})' if letter.error else ''}"
        if refused is None:
            self._log.warning(
                "%s: message %s dead-lettered to %r after %d attempt(s): %s",
                self._runner.label, where(delivery), letter.destination, letter.attempts, why,
            )  # fmt: skip
        else:
            self._log.warning(
                "%s: message %s not dead-lettered after %d attempt(s): %s; %s",
                self._runner.label, where(delivery), letter.attempts, why, refused.message,
            )  # fmt: skip

    # ---- observing ---------------------------------------------------------------------------

    def observe(
        self,
        delivery: Delivery,
        message: Any,
        outcome: Outcome,
        verdict: Verdict,
        error: BaseException | None,
        *,
        called: bool = True,
    ) -> None:
        """Fill in the delivery's call record (middlewares) and tell the observers."""
        call = self._calls.get(id(delivery)) if self._calls else None
        if call is not None:
            _decided(call, message, outcome, verdict, error, called)
        runner = self._runner
        observers = runner.observers
        if observers:
            starts = self._starts
            began = None if starts is None else starts.get(id(delivery))
            seconds = None if began is None else time.perf_counter() - began
            if (
                runner.ack_counters
                and called
                and verdict.dead_letter is None
                and verdict.outcome.kind is OutcomeKind.ACK
            ):  # a plain ack: counted without a record where it can be
                for count in runner.ack_counters:
                    count(seconds)
                observers = runner.ack_observers
                if not observers:
                    return
            record = HandledMessage(
                runner.label, delivery, message, outcome, verdict, error, called, seconds
            )
            for observer in observers:
                observer(record)

    def _observe_ack(self, delivery: Delivery, message: Any, began: float) -> None:
        """The observers' record of an ack of the in-line path: its verdict needs no policy;
        the counters of plain acks get its seconds alone, and the middlewares' call record
        (in line inside their hooks) is filled as ``observe`` fills it."""
        call = self._calls.get(id(delivery)) if self._calls else None
        if call is not None:
            _decided(call, message, ACK, _ACK_VERDICT, None, True)
        runner = self._runner
        seconds = time.perf_counter() - began
        for count in runner.ack_counters:
            count(seconds)
        observers = runner.ack_observers
        if observers:
            record = HandledMessage(
                runner.label, delivery, message, ACK, _ACK_VERDICT, None, True, seconds
            )
            for observer in observers:
                observer(record)


def _counting_acks(
    count: Callable[[float | None], None],
) -> Callable[[Delivery, Any, float], None]:
    """``Verdicts._observe_ack`` where one ack counter is all there is to tell (no call record,
    no observer that needs one): the same count, without a lookup on the way."""
    perf_counter = time.perf_counter

    def observe_ack(delivery: Delivery, message: Any, began: float) -> None:
        count(perf_counter() - began)

    return observe_ack


def _decided(
    call: HandlerCall,
    message: Any,
    outcome: Outcome,
    verdict: Verdict,
    error: BaseException | None,
    called: bool,
) -> None:
    """Fill in ``call`` with what was decided, and run its ``on_decided`` hooks."""
    call.message, call.outcome, call.verdict = message, outcome, verdict
    call.error, call.called = error, called
    for decided in call.on_decided:
        decided(call)


def handler_call(runner: SubscriptionRunner, delivery: Delivery) -> HandlerCall:
    """The record of ``delivery``'s handling the middlewares' ``handle`` hooks see."""
    return HandlerCall(
        runner.label, runner.subscription.source, runner.broker_name, delivery,
        kind=broker_kind(runner.subscription.broker),
    )  # fmt: skip


def where(delivery: Delivery) -> str:
    """Where a logged message was: its position, or, on a source without positions (a list,
    a channel), the stream it came from."""
    if delivery.position is None:
        return f"from {delivery.stream!r}"
    return f"at {delivery.position!r}"
