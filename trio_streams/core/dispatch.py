"""The dispatcher: takes deliveries off a subscription's channel and runs the handler on them.

decode payload → fill parameters → handler → outcome → failure policy → settle.

Three shapes, all reading the one bounded channel:

- ``workers=n`` (default 1): n tasks; with 1, messages are handled strictly in order;
- ``workers=n, by_key=...``: one router task decodes each message, picks its lane from the key,
  and n lane tasks keep per-key order (lanes are bounded channels too);
- ``batch=n, max_wait=s``: each worker collects up to n deliveries, waiting at most s after the
  first, and hands the handler a list; the handler answers per element.

Workers take runs: after one wait on the channel, a worker handles what is already queued
(``receive_nowait``), up to ``RUN`` deliveries, then passes a schedule point, so one pass
through Trio's scheduler serves a run rather than each delivery, and a busy subscription still
yields to every other task once a run. A handler that takes the payload alone (no other
parameter, outside an ordered lane) is handled in line: decode, call, and for the common
outcome (``None``: ack) the settle, which is skipped altogether where the source says an ack
settles nothing (``SubscriptionSource.acks_are_noops``). Everything else goes the general way.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Awaitable, Callable, Hashable, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import trio

from ._alone import RunGate
from ._escapes import escaped
from ._failure import Verdict
from .codec import DecodeError, EncodeError, encode
from .context import Context
from .delivery import Delivery, retry_target_of
from .depends import DependencyScope
from .errors import BaseExceptionRaised
from .handler import UNDECODED
from .middleware import HandlerCall, broker_kind
from .outcome import Outcome, OutcomeKind, ack, drop, retry
from .reporting import describe
from .transport import DeadLetter, SourceFault, Unsettled

if TYPE_CHECKING:
    from .subscription import SubscriptionRunner

__all__ = ["RUN", "Dispatcher", "HandledMessage"]

_ACK = ack()
_ACK_VERDICT = Verdict(_ACK)
#: The most deliveries a worker handles between two schedule points when they are already
#: queued (see the module docstring).
RUN = 32
#: Deliveries waiting in each ordered lane.
_LANE_BUFFER = 4
_UNDECODED: Any = UNDECODED


class _Unencodable(Exception):
    """The handler's return value cannot be encoded for its publishers (the handler ran)."""

    def __init__(self, error: EncodeError) -> None:
        super().__init__(str(error))
        self.error = error


class _Again:
    """An ordered lane retries in place: handle the same delivery again (see ``_retry_in_lane``)."""


_AGAIN = _Again()


class _KeyFailed:
    """A lane router could not build a message (its payload type's own constructor raised):
    the lane runs the failure policy on it, as the handler's arguments would have."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class _KeyRaised:
    """The subscription's ``by_key`` function raised on a message: it has no lane, and no
    handler runs, so no attempt is charged; the lane settles it by the decode policy."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
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


class Dispatcher:
    def __init__(self, runner: SubscriptionRunner) -> None:
        self._runner = runner
        subscription = runner.subscription
        self._handler = subscription.handler
        self._options = subscription.options
        self._policy = subscription.options.policy
        self._channel = runner.channel
        self._publishers = subscription.publishers
        self._log = runner.logger
        #: Handlers without dependencies skip the dependency scope altogether.
        self._handle_delivery = (
            self._handle_one if self._handler.dependencies is None else self._handle_scoped
        )
        handler = self._handler
        #: Deliveries taken off the channel by the lane router, not yet by their lane's worker.
        self._in_lanes: dict[int, Delivery] = {}
        #: The middlewares' ``handle`` hooks, and the call record of each delivery they wrap.
        self._hooks = runner.handle_hooks
        self._calls: dict[int, HandlerCall] = {}
        #: A source whose consumer a test can kill (``t.kill_consumer``), and the cancel scope
        #: of each delivery in hand, to end them as the crash would.
        source = runner.source
        self._killable: Any = source if getattr(source, "killable", False) else None
        self._live: dict[int, tuple[Delivery, trio.CancelScope]] = {}
        #: Several handlers at once on a source that counts runs: a delivery whose last run
        #: died with its process runs alone (:mod:`._alone`).
        concurrent = subscription.options.batch is None and subscription.options.workers > 1
        self._gate = RunGate() if concurrent and source.counts_runs else None
        #: With observers: when the handling of each delivery in hand began (perf_counter).
        self._starts: dict[int, float] | None = {} if runner.observers else None
        #: The handler takes the payload alone: its deliveries are handled in line (unless a
        #: middleware wraps each one, or a test may kill the consumer mid-handler).
        self._payload_only = (
            handler.dependencies is None
            and not handler.extractors
            and not handler.needs_context
            and not self._hooks
            and self._killable is None
        )

    async def run(self) -> None:
        """Handle deliveries until the channel is closed and drained.

        Cancelled, every delivery it holds that was not settled is reported abandoned to the
        source (``SubscriptionSource.unsettled``).
        """
        options = self._options
        try:
            async with trio.open_nursery() as nursery:
                if options.batch is not None:
                    for _ in range(options.workers):
                        nursery.start_soon(self._batch_worker, options.batch, options.max_wait)
                elif options.by_key is not None and options.workers > 1:
                    await self._route_lanes(nursery, options.workers)
                else:
                    for _ in range(options.workers):
                        nursery.start_soon(self._worker)
        finally:
            waiting, self._in_lanes = self._in_lanes, {}
            for delivery in waiting.values():
                self._runner.unsettled(delivery, Unsettled.ABANDONED)

    # ---- shapes ------------------------------------------------------------------------------

    async def _worker(self) -> None:
        # by_key with one worker: one lane, so retries keep the key's order as lanes do.
        ordered = self._options.by_key is not None
        if self._payload_only and not ordered:
            await self._payload_worker()
            return
        channel = self._channel
        receive = channel.receive
        take = channel.receive_nowait
        process = self._process
        checkpoint = trio.lowlevel.checkpoint
        while True:
            try:
                delivery = await receive()
            except trio.EndOfChannel:
                return
            run = RUN
            while True:
                await process(delivery, _UNDECODED, ordered)
                run -= 1
                if not run:
                    await checkpoint()  # a run's schedule point
                    break
                try:
                    delivery = take()
                except trio.WouldBlock:
                    break
                except trio.EndOfChannel:
                    return

    async def _payload_worker(self) -> None:
        """``_worker`` for a handler that takes the payload alone, outside an ordered lane: the
        common path in line (current, first attempt, decoded, the handler returns None, ack),
        everything else through the general path, with the same outcome for every delivery.

        Cancelled, the delivery in hand is reported abandoned, as ``_process`` does."""
        channel = self._channel
        runner = self._runner
        receive = channel.receive
        take = channel.receive_nowait
        finished = channel.finished
        process = self._process
        decode = self._handler.decode
        fn = self._handler.fn
        settle = runner.settle
        source = runner.source
        observers = runner.observers
        label = runner.label
        starts = self._starts
        perf_counter = time.perf_counter
        checkpoint = trio.lowlevel.checkpoint
        while True:
            try:
                delivery = await receive()
            except trio.EndOfChannel:
                return
            # Read once per run: an ack settles nothing there, so the delivery ends as a
            # settle would end it.
            noop_acks = source.acks_are_noops
            runs = source.attempt_started if source.counts_runs else None
            record_run = source.record_run
            gate = self._gate
            run = RUN
            while True:
                if delivery.attempt != 1 or not channel.is_current(delivery):
                    # A retry copy (maybe another's, maybe spent), or made stale by a seek.
                    await process(delivery, _UNDECODED)
                else:
                    later = False
                    began = perf_counter() if observers else 0.0
                    try:
                        try:
                            message = decode(delivery.payload)
                        except DecodeError as exc:
                            if starts is not None:  # timed by _observe, off the common path
                                starts[id(delivery)] = began
                            later = await self._undecodable(delivery, exc)
                        except Exception as exc:  # noqa: BLE001 - a payload's constructor failed
                            # As the general path: the failure policy, the handler not called.
                            if starts is not None:
                                starts[id(delivery)] = began
                            outcome = self._failed(delivery, exc)
                            concluded = await self._conclude(
                                delivery, None, outcome, exc, called=False
                            )
                            later = concluded is True
                        else:
                            if gate is not None and not gate.enter_nowait():
                                # One runs alone now: this waits its turn on the general path.
                                later = await self._handle_delivery(delivery, message) is True
                            else:
                                try:
                                    try:
                                        if runs is not None and not record_run(delivery):
                                            await runs(delivery)
                                        result = await fn(message)
                                    except Exception as exc:  # noqa: BLE001 - the failure policy
                                        if starts is not None:
                                            starts[id(delivery)] = began
                                        outcome = self._failed(delivery, exc)
                                        concluded = await self._conclude(
                                            delivery, message, outcome, exc
                                        )
                                        later = concluded is True
                                    except BaseException as exc:
                                        if (stop := self._escaped(exc)) is None:
                                            raise
                                        raise stop from exc
                                    else:
                                        if result is not None:
                                            if starts is not None:
                                                starts[id(delivery)] = began
                                            later = await self._conclude_result(
                                                delivery, message, result
                                            )
                                        else:
                                            if observers:  # the verdict of an ack needs no policy
                                                record = HandledMessage(
                                                    label, delivery, message, _ACK, _ACK_VERDICT,
                                                    None, True, perf_counter() - began,
                                                )  # fmt: skip
                                                for observer in observers:
                                                    observer(record)
                                            if noop_acks:
                                                runner.ended_by_noop_ack(delivery)
                                            else:
                                                await settle(delivery, _ACK)
                                finally:
                                    if gate is not None:
                                        gate.leave()
                    except BaseException:
                        # Cancelled (or failed) before it was settled: it never will be.
                        runner.unsettled(delivery, Unsettled.ABANDONED)
                        finished(delivery)
                        raise
                    finally:
                        if starts:
                            starts.pop(id(delivery), None)
                    if not later:
                        finished(delivery)
                run -= 1
                if not run:
                    await checkpoint()  # a run's schedule point
                    break
                try:
                    delivery = take()
                except trio.WouldBlock:
                    break
                except trio.EndOfChannel:
                    return

    async def _route_lanes(self, nursery: trio.Nursery, lanes: int) -> None:
        key_of = self._key_function()
        senders = []
        for _ in range(lanes):
            send, receive = trio.open_memory_channel[tuple[Delivery, Any]](_LANE_BUFFER)
            senders.append(send)
            nursery.start_soon(self._lane_worker, receive)
        async with contextlib.AsyncExitStack() as stack:
            for send in senders:
                await stack.enter_async_context(send)
            while True:
                try:
                    delivery = await self._channel.receive()
                except trio.EndOfChannel:
                    return
                self._in_lanes[id(delivery)] = delivery
                key, message = key_of(delivery)
                await senders[hash(key) % lanes].send((delivery, message))

    def _key_function(self) -> Callable[[Delivery], tuple[Hashable, Any]]:
        by_key = self._options.by_key
        if isinstance(by_key, str):
            header = by_key
            return lambda delivery: (delivery.headers.get(header), _UNDECODED)
        assert by_key is not None
        decode = self._handler.decode
        key_function = by_key

        def key_of(delivery: Delivery) -> tuple[Hashable, Any]:
            try:
                message = decode(delivery.payload)
            except DecodeError:
                return None, _UNDECODED  # the lane decodes again and runs the decode policy
            except Exception as exc:  # noqa: BLE001 - a payload's own constructor failed
                return None, _KeyFailed(exc)  # the lane runs the failure policy
            try:
                key = key_function(message)
                hash(key)
            except Exception as exc:  # noqa: BLE001 - one bad message must not stop the router
                return None, _KeyRaised(exc)
            return key, message

        return key_of

    async def _lane_worker(self, receive: trio.MemoryReceiveChannel[tuple[Delivery, Any]]) -> None:
        in_lanes = self._in_lanes
        async with receive:
            async for delivery, message in receive:
                del in_lanes[id(delivery)]
                await self._process(delivery, message, True)

    async def _batch_worker(self, size: int, max_wait: float) -> None:
        channel = self._channel
        while True:
            try:
                batch = [await channel.receive()]
            except trio.EndOfChannel:
                return
            ended = False
            try:
                with trio.move_on_after(max_wait):
                    while len(batch) < size:
                        try:
                            batch.append(channel.receive_nowait())
                            continue
                        except trio.WouldBlock:
                            pass
                        except trio.EndOfChannel:
                            ended = True
                            break
                        try:
                            batch.append(await channel.receive())
                        except trio.EndOfChannel:
                            ended = True
                            break
            except BaseException:
                for delivery in batch:  # cancelled while filling the batch
                    self._runner.unsettled(delivery, Unsettled.ABANDONED)
                raise
            await self._process_batch(batch)
            if ended:
                return

    # ---- one delivery ------------------------------------------------------------------------

    async def _process(self, delivery: Delivery, message: Any, ordered: bool = False) -> None:
        if self._killable is not None:
            await self._process_killable(delivery, message, ordered)
        elif self._hooks:
            await self._process_wrapped(delivery, message, ordered)
        else:
            await self._process_plain(delivery, message, ordered)

    async def _process_killable(self, delivery: Delivery, message: Any, ordered: bool) -> None:
        """``_process`` on a source whose consumer a test can kill (the in-process work queue,
        ``t.kill_consumer``): a delivery the dead consumer still had queued is dropped
        unhandled, and one in a handler is cancelled there, as the crash would end it."""
        killable = self._killable
        assert killable is not None
        if killable.dead(delivery):
            self._runner.unsettled(delivery, Unsettled.STALE)
            self._channel.finished(delivery)
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope() as scope:
            self._live[id(delivery)] = (delivery, scope)
            try:
                if self._hooks:
                    await self._process_wrapped(delivery, message, ordered)
                else:
                    await self._process_plain(delivery, message, ordered)
            finally:
                del self._live[id(delivery)]

    def end_dead(self) -> int:
        """Cancel the handlers of the deliveries the source now calls dead (its consumer was
        killed); returns how many. Their deliveries end unsettled, as a crash leaves them."""
        killable = self._killable
        if killable is None:
            return 0
        ended = 0
        for delivery, scope in list(self._live.values()):
            if killable.dead(delivery):
                scope.cancel()
                ended += 1
        return ended

    async def _process_wrapped(self, delivery: Delivery, message: Any, ordered: bool) -> None:
        """``_process`` inside the middlewares' ``handle`` hooks (outermost first): entered
        before decoding, left once the delivery is settled; the call record is filled in as
        it goes (``_observe``)."""
        runner = self._runner
        call = HandlerCall(
            runner.label, runner.subscription.source, runner.broker_name, delivery,
            kind=broker_kind(runner.subscription.broker),
        )  # fmt: skip
        calls = self._calls
        calls[id(delivery)] = call
        try:
            async with AsyncExitStack() as stack:
                for hook in self._hooks:
                    await stack.enter_async_context(hook.handle(call))
                await self._process_plain(delivery, message, ordered)
                call.settled = call.verdict is not None
        finally:
            calls.pop(id(delivery), None)

    async def _process_plain(self, delivery: Delivery, message: Any, ordered: bool) -> None:
        later = False
        done = False
        starts = self._starts
        if starts is not None:
            starts.setdefault(id(delivery), time.perf_counter())
        try:
            if not self._channel.is_current(delivery):
                # A seek made it stale before its handler started.
                self._runner.unsettled(delivery, Unsettled.STALE)
            elif self._for_another(delivery):
                await self._runner.settle(delivery, _ACK)
            elif ordered:
                handle = self._handle_delivery
                while (result := await handle(delivery, message, ordered=True)) is _AGAIN:
                    pass
                later = result is True
            else:
                later = await self._handle_delivery(delivery, message) is True
            done = True
        finally:
            if starts is not None:
                starts.pop(id(delivery), None)
            if not done:
                # Cancelled (or failed) before it was settled: it never will be.
                self._runner.unsettled(delivery, Unsettled.ABANDONED)
            if not later:
                self._channel.finished(delivery)

    def _for_another(self, delivery: Delivery) -> bool:
        """A retry copy another subscription of the stream asked for: passed over unhandled
        (settled as consumed, so a durable position moves past it), and not recorded."""
        target = retry_target_of(delivery)
        return target is not None and target != self._runner.retry_target

    async def _handle_scoped(
        self, delivery: Delivery, message: Any, ordered: bool = False
    ) -> bool | _Again:
        """``_handle_one`` for a handler with dependencies: they are cleaned up once the
        delivery is settled (or, in an ordered lane that retries in place, once this attempt
        is decided), or when it is cancelled."""
        scope = DependencyScope()
        try:
            later = await self._handle_one(delivery, message, scope, ordered=ordered)
        except BaseException as exc:
            await scope.aclose(exc, self._log, self._runner.label)
            raise
        await scope.aclose(scope.error, self._log, self._runner.label)
        return later

    async def _handle_one(
        self,
        delivery: Delivery,
        message: Any,
        scope: DependencyScope | None = None,
        ordered: bool = False,
    ) -> bool | _Again:
        """Handle ``delivery`` once and carry out the verdict. True if a delayed retry now owns
        it; ``_AGAIN`` if an ordered lane is to handle it again in place."""
        if delivery.attempt > self._policy.max_attempts:
            return await self._spent(delivery)
        if type(message) is _KeyRaised:
            return await self._unkeyed(delivery, message.error)
        gate = self._gate
        if gate is None:
            return await self._run_one(delivery, message, scope, ordered)
        alone = self._runner.source.runs_alone(delivery)
        await (gate.enter_alone() if alone else gate.enter())
        try:
            return await self._run_one(delivery, message, scope, ordered)
        finally:
            if alone:
                gate.leave_alone()
            else:
                gate.leave()

    async def _run_one(
        self, delivery: Delivery, message: Any, scope: DependencyScope | None, ordered: bool
    ) -> bool | _Again:
        """``_handle_one``'s run: counted, the arguments built, the handler called, and the
        verdict carried out."""
        source = self._runner.source
        if source.counts_runs and not source.record_run(delivery):
            await source.attempt_started(delivery)  # counted before its dependencies run
        handler = self._handler
        context = Context(self._runner, delivery) if handler.needs_context else None
        if context is not None and self._calls:
            call = self._calls.get(id(delivery))
            if call is not None:
                call.context = context
        error: BaseException | None = None
        try:
            if type(message) is _KeyFailed:
                raise message.error
            args = await handler.arguments(delivery, context, message, scope)
        except DecodeError as exc:
            if scope is not None:
                scope.error = exc
            return await self._undecodable(delivery, exc)
        except Exception as exc:  # noqa: BLE001 - a failing extractor or key runs the policy
            error = exc
            if scope is not None:
                scope.error = exc
            outcome = self._failed(delivery, exc)
            args = None
        if args is not None and not self._channel.is_current(delivery):
            # A seek made it stale while its arguments were being built.
            self._runner.unsettled(delivery, Unsettled.STALE)
            return False
        if args is None:
            return await self._conclude(
                delivery, None, outcome, error, called=False, ordered=ordered
            )
        try:
            result = await handler.fn(*args)
            outcome = await self._outcome_of(result)
        except _Unencodable as exc:
            if scope is not None:
                scope.error = exc.error
            return await self._unencodable(delivery, args[0], exc.error)
        except Exception as exc:  # noqa: BLE001 - a failing handler runs the failure policy
            error = exc
            if scope is not None:
                scope.error = exc
            outcome = self._failed(delivery, exc)
        except BaseException as exc:
            if (stop := self._escaped(exc)) is None:
                raise
            raise stop from exc
        return await self._conclude(delivery, args[0], outcome, error, ordered=ordered)

    def _escaped(self, error: BaseException) -> BaseExceptionRaised | None:
        """What the handler raised past the failure policy, as the error that stops the
        subscription: a ``BaseException`` that is not a cancellation (see :mod:`.escapes`).
        None for a cancellation, which goes on as it is."""
        where = f"handler {self._handler.name} of subscription {self._runner.label!r}"
        return escaped(error, where)

    async def _conclude_result(self, delivery: Delivery, message: Any, result: Any) -> bool:
        """The handler of a payload-only delivery returned ``result``: publish it, then settle
        (as ``_handle_one`` does). True if a delayed retry now owns the delivery."""
        error: BaseException | None = None
        try:
            outcome = await self._outcome_of(result)
        except _Unencodable as exc:
            return await self._unencodable(delivery, message, exc.error)
        except Exception as exc:  # noqa: BLE001 - a failing publish runs the failure policy
            error = exc
            outcome = self._failed(delivery, exc)
        later = await self._conclude(delivery, message, outcome, error)
        assert later is not _AGAIN
        return later is True

    async def _conclude(
        self,
        delivery: Delivery,
        message: Any,
        outcome: Outcome,
        error: BaseException | None,
        *,
        called: bool = True,
        ordered: bool = False,
    ) -> bool | _Again:
        """Decide and carry out what becomes of ``delivery`` after ``outcome``: observed,
        settled, delayed or retried in its lane. True if a delayed retry now owns it; ``_AGAIN``
        if an ordered lane is to handle it again in place."""
        if outcome is _ACK and not self._runner.observers and not self._hooks:
            # The common case, without building a verdict.
            await self._runner.settle(delivery, outcome)
            return False
        verdict = self._policy.decide(delivery, outcome)
        self._observe(delivery, message, outcome, verdict, error, called=called)
        if ordered and verdict.dead_letter is None and verdict.outcome.is_retry:
            return await self._retry_in_lane(delivery, verdict.outcome)
        return await self._settle(delivery, verdict, error)

    async def _retry_in_lane(self, delivery: Delivery, outcome: Outcome) -> bool | _Again:
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
                return False
        else:
            await trio.lowlevel.checkpoint()
        if not self._channel.is_current(delivery):
            runner.unsettled(delivery, Unsettled.STALE)
            return False
        delivery.attempt += 1
        return _AGAIN

    async def _spent(self, delivery: Delivery) -> bool:
        """A delivery already tried ``max_attempts`` times (a handler that crashed the process
        never settled it, or the cap was lowered): not handled again, dead-lettered or dropped.
        True if a delayed retry now owns it (never)."""
        runs = delivery.attempt - 1  # the attempts made: this delivery is not one
        self._log.warning(
            "%s: message %s was tried %d times (max_attempts=%d): not handled again",
            self._runner.label,
            _where(delivery),
            runs,
            self._policy.max_attempts,
        )
        verdict = Verdict(drop(), self._policy.dead_letter)
        self._observe(delivery, None, verdict.outcome, verdict, None, called=False)
        return await self._settle(delivery, verdict, attempts=runs)

    async def _undecodable(self, delivery: Delivery, exc: DecodeError) -> bool:
        """Run the decode policy; True if a delayed retry now owns the delivery."""
        if exc.header is None and delivery.layout_hint is not None:
            exc = exc.with_hint(delivery.layout_hint)  # written without the transport's layout
        what = "decode" if exc.header is None else f"read header {exc.header!r} of"
        self._log.warning(
            "%s: cannot %s the message %s: %s",
            self._runner.label,
            what,
            _where(delivery),
            exc.reason,
        )
        verdict = self._policy.on_undecodable()
        self._observe(delivery, None, verdict.outcome, verdict, exc, called=False)
        return await self._settle(delivery, verdict, exc, reason="undecodable")

    async def _unkeyed(self, delivery: Delivery, exc: Exception) -> bool:
        """``by_key`` raised on ``delivery``'s message: no retry gives it a key, and no handler
        ran, so it is settled by the decode policy (dead letter, reason ``by-key``, else drop)
        with no attempt charged. True if a delayed retry now owns it (never)."""
        verdict = self._policy.on_undecodable()
        self._log.warning(
            "%s: by_key raised on the message %s, so the handler did not run: %s; %s",
            self._runner.label,
            _where(delivery),
            describe(exc),
            "dead-lettering it" if verdict.dead_letter is not None else "dropped",
        )
        self._observe(delivery, None, verdict.outcome, verdict, exc, called=False)
        return await self._settle(
            delivery, verdict, exc, reason="by-key", attempts=delivery.attempt - 1
        )

    async def _unencodable(self, delivery: Delivery, message: Any, exc: EncodeError) -> bool:
        """The handler ran, but its return value cannot be published: running it again would
        repeat its effects for the same result, so the delivery is dead-lettered at once (or
        dropped, logged as an error). True if a delayed retry now owns it (never)."""
        verdict = self._policy.on_unencodable()
        if verdict.dead_letter is None:
            self._log.error(
                "%s: message %s dropped: the handler's return value cannot be published "
                "(%s); the handler is not run again",
                self._runner.label,
                _where(delivery),
                exc,
            )
        self._observe(delivery, message, verdict.outcome, verdict, exc)
        return await self._settle(delivery, verdict, exc, reason="unencodable")

    def _failed(self, delivery: Delivery, exc: Exception) -> Outcome:
        # A failure that will be retried is one WARNING line (its traceback at DEBUG); the
        # last attempt's is an ERROR with the traceback.
        outcome = self._policy.on_exception(delivery)
        label, attempt, cap = self._runner.label, delivery.attempt, self._policy.max_attempts
        if attempt >= cap:
            self._log.error(
                "%s: handler failed on attempt %d of %d, the last (message %s): %s",
                label,
                attempt,
                cap,
                _where(delivery),
                describe(exc),
                exc_info=exc,
            )
        else:
            self._log.warning(  # the retry is logged once it is written (``_settle``)
                "%s: handler failed on attempt %d of %d (message %s): %s",
                label,
                attempt,
                cap,
                _where(delivery),
                describe(exc),
            )
            self._log.debug("%s: the traceback of attempt %d", label, attempt, exc_info=exc)
        return outcome

    async def _outcome_of(self, result: Any) -> Outcome:
        if result is None:
            return _ACK
        if isinstance(result, Outcome):
            return result
        publishers = self._publishers
        if publishers:
            try:
                payload = encode(result)  # once for every publisher, before any publishes
            except EncodeError as exc:
                raise _Unencodable(exc) from None
            for publisher in publishers:
                await publisher.publish(payload)
        return _ACK

    # ---- batches -----------------------------------------------------------------------------

    async def _process_batch(self, batch: list[Delivery]) -> None:
        if not self._hooks:
            await self._process_batch_plain(batch)
            return
        runner = self._runner
        calls = self._calls
        try:
            async with AsyncExitStack() as stack:
                for delivery in batch:  # each delivery of the batch has its own call
                    call = HandlerCall(
                        runner.label, runner.subscription.source, runner.broker_name, delivery,
                        kind=broker_kind(runner.subscription.broker),
                    )  # fmt: skip
                    calls[id(delivery)] = call
                    for hook in self._hooks:
                        await stack.enter_async_context(hook.handle(call))
                await self._process_batch_plain(batch)
                for delivery in batch:
                    found = calls.get(id(delivery))
                    if found is not None:
                        found.settled = found.verdict is not None
        finally:
            for delivery in batch:
                calls.pop(id(delivery), None)

    async def _process_batch_plain(self, batch: list[Delivery]) -> None:
        if self._handler.dependencies is None:
            await self._handle_batch(batch, None)
            return
        # Solved once for the batch; cleaned up once every delivery of it is settled.
        scope = DependencyScope()
        try:
            await self._handle_batch(batch, scope)
        except BaseException as exc:
            await scope.aclose(exc, self._log, self._runner.label)
            raise
        await scope.aclose(scope.error, self._log, self._runner.label)

    async def _handle_batch(self, batch: list[Delivery], scope: DependencyScope | None) -> None:
        channel = self._channel
        runner = self._runner
        later: set[int] = set()
        #: Deliveries settled, delayed or reported unsettled: the rest were abandoned.
        ended: set[int] = set()

        def stale(delivery: Delivery) -> None:
            runner.unsettled(delivery, Unsettled.STALE)
            ended.add(id(delivery))

        async def settle(delivery: Delivery, settling: Awaitable[bool]) -> None:
            if await settling:
                later.add(id(delivery))
            ended.add(id(delivery))

        try:
            current = []
            for delivery in batch:
                if not channel.is_current(delivery):
                    stale(delivery)
                elif self._for_another(delivery):
                    await runner.settle(delivery, _ACK)
                    ended.add(id(delivery))
                elif delivery.attempt > self._policy.max_attempts:
                    await settle(delivery, self._spent(delivery))
                else:
                    current.append(delivery)
            good: list[Delivery] = []
            messages: list[Any] = []
            decode = self._handler.decode
            for delivery in current:
                try:
                    messages.append(decode(delivery.payload))
                except DecodeError as exc:
                    await settle(delivery, self._undecodable(delivery, exc))
                except Exception as exc:  # noqa: BLE001 - one bad message fails alone
                    outcome = self._failed(delivery, exc)
                    verdict = self._policy.decide(delivery, outcome)
                    self._observe(delivery, None, outcome, verdict, exc, called=False)
                    await settle(delivery, self._settle(delivery, verdict, exc))
                else:
                    good.append(delivery)
            # Settling undecodable ones may have yielded: a seek may have made others stale.
            kept = []
            for delivery, message in zip(good, messages, strict=True):
                if channel.is_current(delivery):
                    kept.append((delivery, message))
                else:
                    stale(delivery)
            if not kept:
                return
            good = [d for d, _ in kept]
            messages = [m for _, m in kept]
            source = runner.source
            if source.counts_runs:  # one run of the batch handler is an attempt of each
                for delivery in good:
                    if not source.record_run(delivery):
                        await source.attempt_started(delivery)
            outcomes, error = await self._call_batch(good, messages, scope)
            for delivery, message, outcome in zip(good, messages, outcomes, strict=True):
                verdict = self._policy.decide(delivery, outcome)
                self._observe(delivery, message, outcome, verdict, error)
                await settle(delivery, self._settle(delivery, verdict, error))
        finally:
            for delivery in batch:
                if id(delivery) not in ended:
                    runner.unsettled(delivery, Unsettled.ABANDONED)
                if id(delivery) not in later:
                    channel.finished(delivery)

    async def _call_batch(
        self, deliveries: list[Delivery], messages: list[Any], scope: DependencyScope | None
    ) -> tuple[list[Outcome], BaseException | None]:
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
            return _batch_outcomes(result, len(deliveries)), None
        except Exception as exc:  # noqa: BLE001 - a failing handler runs the failure policy
            if scope is not None:
                scope.error = exc
            last = sum(d.attempt >= self._policy.max_attempts for d in deliveries)
            if last:
                self._log.error(
                    "%s: batch handler failed on %d messages, the last attempt of %d: %s",
                    self._runner.label,
                    len(deliveries),
                    last,
                    describe(exc),
                    exc_info=exc,
                )
            else:
                self._log.warning(
                    "%s: batch handler failed on %d messages: %s",
                    self._runner.label,
                    len(deliveries),
                    describe(exc),
                )
                self._log.debug("%s: the traceback", self._runner.label, exc_info=exc)
            return [self._policy.on_exception(d) for d in deliveries], exc
        except BaseException as exc:
            if (stop := self._escaped(exc)) is None:
                raise
            raise stop from exc

    # ---- settling ----------------------------------------------------------------------------

    async def _settle(
        self,
        delivery: Delivery,
        verdict: Verdict,
        error: BaseException | None = None,
        *,
        reason: str = "max-attempts",
        attempts: int | None = None,
    ) -> bool:
        """Carry out ``verdict``. True if a delayed retry now owns the delivery. ``attempts``:
        how many times it was tried (its attempt, unless it is spent: one fewer)."""
        runner = self._runner
        tried = delivery.attempt if attempts is None else attempts
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
            return False
        elif verdict.outcome.kind is OutcomeKind.DROP and tried >= self._policy.max_attempts:
            self._log.warning(
                "%s: message %s dropped after %d attempt(s): %s%s",
                runner.label,
                _where(delivery),
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
                runner.label, _where(delivery), outcome.delay,
            )  # fmt: skip
            return True
        settled = await runner.settle(delivery, outcome)
        if settled and outcome.is_retry:  # a failed one is the settle fault's (counted there)
            self._log.debug(
                "%s: retry of message %s written%s",
                runner.label,
                _where(delivery),
                f" for {outcome.delay:g}s from now" if outcome.delay else "",
            )
        return False

    def _log_dead_letter(
        self, delivery: Delivery, letter: DeadLetter, refused: SourceFault | None
    ) -> None:
        """One line, once the dead letter was tried: "dead-lettered" only when it was
        written; otherwise why not, and what became of the delivery (the fault's message)."""
        why = f"{letter.reason}{f' ({letter.error})' if letter.error else ''}"
        if refused is None:
            self._log.warning(
                "%s: message %s dead-lettered to %r after %d attempt(s): %s",
                self._runner.label, _where(delivery), letter.destination, letter.attempts, why,
            )  # fmt: skip
        else:
            self._log.warning(
                "%s: message %s not dead-lettered after %d attempt(s): %s; %s",
                self._runner.label, _where(delivery), letter.attempts, why, refused.message,
            )  # fmt: skip

    def _observe(
        self,
        delivery: Delivery,
        message: Any,
        outcome: Outcome,
        verdict: Verdict,
        error: BaseException | None,
        *,
        called: bool = True,
    ) -> None:
        call = self._calls.get(id(delivery)) if self._calls else None
        if call is not None:
            call.message, call.outcome, call.verdict = message, outcome, verdict
            call.error, call.called = error, called
            for decided in call.on_decided:
                decided(call)
        observers = self._runner.observers
        if observers:
            starts = self._starts
            began = None if starts is None else starts.get(id(delivery))
            seconds = None if began is None else time.perf_counter() - began
            record = HandledMessage(
                self._runner.label, delivery, message, outcome, verdict, error, called, seconds
            )
            for observer in observers:
                observer(record)


def _batch_outcomes(result: Any, size: int) -> list[Outcome]:
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


def _where(delivery: Delivery) -> str:
    """Where a logged message was: its position, or, on a source without positions (a list,
    a channel), the stream it came from."""
    if delivery.position is None:
        return f"from {delivery.stream!r}"
    return f"at {delivery.position!r}"
