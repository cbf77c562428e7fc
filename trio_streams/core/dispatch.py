"""The dispatcher: takes deliveries off a subscription's channel and runs the handler on them.

decode payload → fill parameters → handler → outcome → failure policy → settle.

Its workers take one of three shapes (:mod:`._workers`): ``workers=n`` tasks taking runs of
deliveries, a lane router and ``n`` ordered lanes (``by_key``), or ``n`` batch collectors
(``batch``), whose batches :mod:`._batches` handles. :mod:`._verdicts` carries out what
becomes of a delivery after its handler (failure policy, attempts cap, dead letter, settle).

A handler that takes the payload alone (no other parameter, outside an ordered lane) is handled
in line: decode, call, and for the common outcome (``None``: ack) the settle, which is skipped
altogether where the source says an ack settles nothing (``SubscriptionSource.acks_are_noops``).
With middlewares that wrap each delivery, the same in line inside their hooks. Everything else
goes the general way.
"""

from __future__ import annotations

import contextlib
import time
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any

import trio

from ._alone import RunGate
from ._answers import is_request
from ._batches import Batches
from ._escapes import escaped
from ._verdicts import ACK, HandledMessage, Next, Unencodable, Verdicts, handler_call
from ._workers import (
    RUN,
    KeyFailed,
    KeyRaised,
    collect_batches,
    key_function,
    route_lanes,
    take_runs,
)
from .codec import DecodeError
from .context import Context
from .delivery import Delivery, ReadBatch
from .depends import DependencyScope
from .errors import BaseExceptionRaised
from .handler import UNDECODED
from .transport import Unsettled

if TYPE_CHECKING:
    from collections.abc import Iterator

    from .middleware import HandlerCall
    from .subscription import SubscriptionRunner

__all__ = ["RUN", "Dispatcher", "HandledMessage"]

_UNDECODED: Any = UNDECODED
#: The in-line path's handler was not called: the delivery waits for its turn to run.
_WAITS: Any = object()
#: The in-line path's handler was not called: a seek made the delivery stale while its plain
#: dependencies were solved.
_STALE: Any = object()


class _Unsolved:
    """The in-line path's handler was not called: one of its plain dependencies raised."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class Dispatcher:
    """Runs one subscription's handler on its deliveries (see the module docstring)."""

    def __init__(self, runner: SubscriptionRunner) -> None:
        self._runner = runner
        subscription = runner.subscription
        handler = self._handler = subscription.handler
        self._options = subscription.options
        self._policy = subscription.options.policy
        self._channel = runner.channel
        self._log = runner.logger
        #: The middlewares' ``handle`` hooks, and the call record of each delivery they wrap.
        self._hooks = runner.handle_hooks
        self._calls: dict[int, HandlerCall] = {}
        #: With observers: when the handling of each delivery in hand began (perf_counter).
        self._starts: dict[int, float] | None = {} if runner.observers else None
        self._verdicts = Verdicts(runner, self._calls, self._starts)
        #: Lanes (``by_key``, with one worker or several) keep each key's order: a retry is
        #: handled again in place.
        self._ordered = self._options.by_key is not None
        #: Deliveries taken off the channel by the lane router, not yet by their lane's worker.
        self._in_lanes: dict[int, Delivery] = {}
        #: Handlers without dependencies skip the dependency scope altogether.
        self._handle_delivery = (
            self._handle_one if handler.dependencies is None else self._handle_scoped
        )
        source = runner.source
        #: A source whose consumer can die (``consumer_can_die``): the cancel scope of each
        #: delivery in hand, to end them as the crash would.
        self._mortal = source.consumer_can_die
        self._live: dict[int, tuple[Delivery, trio.CancelScope]] = {}
        #: Several handlers at once on a source that counts runs: a delivery whose last run
        #: died with its process runs alone (:mod:`._alone`).
        concurrent = subscription.options.batch is None and subscription.options.workers > 1
        self._gate = RunGate() if concurrent and source.counts_runs else None
        #: Plain dependencies (no generator in the tree), solved in line without a scope.
        self._plain = None if handler.dependencies is None else handler.dependencies.plain
        #: What a plain dependency raised that is no ``Exception``, on its way out.
        self._dependency_raised: BaseException | None = None
        #: The handler takes the payload alone, or the payload and plain dependencies that need
        #: no ``Context``: its deliveries are handled in line (unless a middleware wraps each
        #: one: then a payload-only handler's are handled in line inside it,
        #: ``_handle_payload``; or its consumer can die mid-handler).
        self._payload_only = (
            (handler.dependencies is None or self._plain is not None)
            and not handler.extractors
            and not handler.needs_context
            and not self._hooks
            and not self._mortal
            and not self._ordered
        )
        #: Inside the middlewares' hooks, a handler that takes the payload alone has its
        #: deliveries handled as the in-line path would (:meth:`_handle_payload`).
        self._wrapped = (
            self._handle_payload
            if handler.dependencies is None
            and not handler.extractors
            and not handler.needs_context
            and not self._mortal
            and not self._ordered
            else self._process_plain
        )
        #: One delivery's handling, outside the in-line path.
        self._handle_plain = self._process_wrapped if self._hooks else self._process_plain
        self._process = self._process_mortal if self._mortal else self._handle_plain

    async def run(self) -> None:
        """Handle deliveries until the channel is closed and drained.

        Cancelled, every delivery it holds that was not settled is reported abandoned to the
        source (``SubscriptionSource.unsettled``).
        """
        options = self._options
        channel = self._channel
        try:
            async with trio.open_nursery() as nursery:
                if options.batch is not None:
                    batches = Batches(self._runner, self._verdicts, self._calls, self._escaped)
                    for _ in range(options.workers):
                        nursery.start_soon(
                            collect_batches, channel, options.batch, options.max_wait,
                            batches.handle, self._runner.unsettled,
                        )  # fmt: skip
                elif options.by_key is not None and options.workers > 1:
                    key_of = key_function(options.by_key, self._handler.decode)
                    await route_lanes(
                        channel, nursery, options.workers, key_of, self._process, self._in_lanes
                    )
                elif self._payload_only:
                    for _ in range(options.workers):
                        nursery.start_soon(self._payload_worker)
                else:
                    for _ in range(options.workers):
                        nursery.start_soon(take_runs, channel, self._process)
        finally:
            waiting, self._in_lanes = self._in_lanes, {}
            for delivery in waiting.values():
                self._runner.unsettled(delivery, Unsettled.ABANDONED)

    # ---- in line -----------------------------------------------------------------------------

    async def _payload_worker(self) -> None:
        """A worker for a handler that takes the payload alone, outside an ordered lane: the
        common case in line (current, first attempt, decoded, the handler returns None, ack),
        everything else the general way, with the same outcome for every delivery. Its own
        copy of :func:`._workers.take_runs`, so the common case costs no call of its own.

        Where nothing needs a delivery for the common case (an ack settles nothing, no
        observer, no run counted), a plain message of a read batch is taken as its payload
        alone (``DeliveryChannel.take_payload``); its delivery is made only if its handling
        leaves the common case. Everything still queued is of the current generation (a seek
        purges the rest), so a message taken is current, and none is checked again.

        Cancelled, the delivery in hand is reported abandoned, as the general way does."""
        channel = self._channel
        runner = self._runner
        wait_queued = channel.wait_queued
        take = channel.receive_nowait
        finished = channel.finished
        is_current = channel.is_current
        process = self._process
        decode = self._handler.decode
        fn = self._handler.fn
        source = runner.source
        observers = runner.observers
        gate = self._gate
        perf_counter = time.perf_counter
        checkpoint = trio.lowlevel.checkpoint
        with_depends = None if self._plain is None else self._with_depends
        while True:
            try:
                await wait_queued()
            except trio.EndOfChannel:
                return
            # Read once per run: an ack settles nothing there, so the delivery ends as a
            # settle would end it.
            noop_acks = source.acks_are_noops
            ack_in_line = source.ack_in_line if source.acks_in_line else None
            runs = source.attempt_started if source.counts_runs else None
            record_run = source.record_run
            alone = noop_acks and not observers and runs is None and gate is None
            alone = alone and with_depends is None
            run = RUN
            while True:
                run = await self._payloads_alone(run) if alone else run
                if not run:
                    await checkpoint()  # a run's schedule point
                    break
                try:
                    delivery = take()
                except trio.WouldBlock:
                    break
                except trio.EndOfChannel:
                    return
                if delivery.attempt != 1 or not is_current(delivery):
                    # A retry copy (maybe another's, maybe spent), or made stale by a seek.
                    await process(delivery, _UNDECODED)
                else:
                    began = perf_counter() if observers else 0.0
                    message = result = _UNDECODED
                    admitted = False
                    try:
                        try:
                            message = decode(delivery.payload)
                            # With a gate, one may run alone now: this then waits its turn
                            # the general way (``_payload_handled``).
                            admitted = gate is None or gate.enter_nowait()
                            if admitted and runs is not None and not record_run(delivery):
                                await runs(delivery)
                            result = (
                                _WAITS
                                if not admitted
                                else await fn(message)
                                if with_depends is None
                                else await with_depends(delivery, message)
                            )
                        except BaseException as exc:  # noqa: BLE001 - see _payload_raised
                            await self._payload_raised(delivery, message, exc, began)
                        else:
                            if (
                                result is None
                                and not is_request(delivery)
                                and (
                                    noop_acks or (ack_in_line is not None and ack_in_line(delivery))
                                )
                            ):
                                # An ack that settles nothing, or that the source settled
                                # at once (a request's ack answers it: the general way,
                                # ``_payload_handled``).
                                if observers:  # the verdict of an ack needs no policy
                                    self._verdicts.observe_ack(delivery, message, began)
                                runner.ended_by_noop_ack(delivery)
                                finished(delivery)
                            else:
                                await self._payload_handled(delivery, message, result, began)
                        finally:
                            if admitted and gate is not None:
                                gate.leave()
                    except BaseException:
                        # Cancelled (or failed) before it was settled: it never will be.
                        runner.unsettled(delivery, Unsettled.ABANDONED)
                        finished(delivery)
                        raise
                run -= 1

    async def _payloads_alone(self, run: int) -> int:
        """Handle the plain messages at the head of the channel, taken as their payload alone
        (see :meth:`_payload_worker`), at most ``run`` of them: what is left of ``run``.

        Each is decoded and handled; ``None`` ends it (an ack that settles nothing, and a
        first attempt without headers is no request). Anything else makes its delivery and goes
        on as the in-line path of a delivery does."""
        channel = self._channel
        take_payload = channel.take_payload
        finished = channel.finished
        decode = self._handler.decode
        fn = self._handler.fn
        while run and (payload := take_payload()) is not None:
            taken_from, index = channel.taken_from, channel.taken_index
            message = _UNDECODED
            try:
                message = decode(payload)
                result = await fn(message)
            except BaseException as exc:  # noqa: BLE001 - see _payload_raised
                await self._alone_raised(taken_from, index, message, exc)
            else:
                if result is None:
                    finished()
                else:
                    await self._alone_handled(taken_from, index, message, result)
            run -= 1
        return run

    async def _with_depends(self, delivery: Delivery, message: Any) -> Any:
        """The in-line path's call of a handler with plain dependencies: they are solved (no
        scope: nothing to clean up), then the handler is called, as the general way's
        ``_run_one`` does. What the handler returns or raises is the in-line path's; a
        dependency that raises, or a seek during an ``async def`` dependency, is returned as
        ``_Unsolved`` / ``_STALE`` for ``_payload_handled`` to conclude as ``_run_one`` would."""
        depends = self._plain
        assert depends is not None
        try:
            if depends.awaits:
                args = await depends.solve(delivery, None, message)
            else:
                args = depends.solve_now(delivery, None, message)
        except Exception as exc:  # noqa: BLE001 - the failure policy runs, as in _run_one
            return _Unsolved(exc)
        except BaseException as exc:
            # Goes on as it is, as from ``_run_one`` (not as the handler's own: ``_escaped``).
            self._dependency_raised = exc
            raise
        if depends.awaits and not self._channel.is_current(delivery):
            return _STALE  # a seek made it stale while its arguments were being built
        return await self._handler.fn(message, *args)

    async def _alone_raised(
        self, taken_from: ReadBatch | None, index: int, message: Any, exc: BaseException
    ) -> None:
        """A message taken as its payload alone could not be decoded, or its handler raised:
        its delivery is made, and goes on as the in-line path's (``_payload_raised``)."""
        assert taken_from is not None
        delivery = taken_from.made(index)
        try:
            await self._payload_raised(delivery, message, exc, 0.0)
        except BaseException:
            self._abandoned(delivery)
            raise

    async def _alone_handled(
        self, taken_from: ReadBatch | None, index: int, message: Any, result: Any
    ) -> None:
        """A message taken as its payload alone: its handler returned ``result``, not None: its
        delivery is made, and goes on as the in-line path's (``_payload_handled``)."""
        assert taken_from is not None
        delivery = taken_from.made(index)
        try:
            await self._payload_handled(delivery, message, result, 0.0)
        except BaseException:
            self._abandoned(delivery)
            raise

    def _abandoned(self, delivery: Delivery) -> None:
        """Cancelled (or failed) before it was settled: it never will be."""
        self._runner.unsettled(delivery, Unsettled.ABANDONED)
        self._channel.finished(delivery)

    async def _payload_raised(
        self, delivery: Delivery, message: Any, exc: BaseException, began: float
    ) -> None:
        """The in-line path's payload could not be decoded (``message`` is still undecoded),
        or its handler raised: as the general way, the decode or the failure policy. A
        ``BaseException`` goes on (as the error that stops the subscription, if it escaped
        the handler)."""
        if not isinstance(exc, Exception):
            if exc is self._dependency_raised:
                self._dependency_raised = None
                raise exc
            if message is _UNDECODED or (stop := self._escaped(exc)) is None:
                raise exc
            raise stop from exc
        verdicts = self._verdicts
        with self._timed(delivery, began):
            if message is not _UNDECODED:
                next_ = await verdicts.failure(delivery, message, exc)
            elif isinstance(exc, DecodeError):
                next_ = await verdicts.undecodable(delivery, exc)
            else:  # a payload type's own constructor raised: the handler was not called
                next_ = await verdicts.failure(delivery, None, exc, called=False)
        self._finish(delivery, next_)

    async def _payload_handled(
        self, delivery: Delivery, message: Any, result: Any, began: float
    ) -> None:
        """The in-line path's handler returned ``result`` (``_WAITS``: it waits for its turn
        to run, the general way): publish it and conclude, or settle the ack."""
        if result is _WAITS:
            next_ = await self._handle_delivery(delivery, message)
        elif type(result) is _Unsolved:
            # A dependency raised before the handler was called, as ``_run_one`` concludes it.
            error = result.error
            with self._timed(delivery, began):
                if isinstance(error, DecodeError):
                    next_ = await self._verdicts.undecodable(delivery, error)
                else:
                    next_ = await self._verdicts.failure(delivery, None, error, called=False)
        elif result is _STALE:
            self._runner.unsettled(delivery, Unsettled.STALE)
            next_ = Next.DONE
        elif result is None and not is_request(delivery):
            if self._runner.observers:  # the verdict of an ack needs no policy
                self._verdicts.observe_ack(delivery, message, began)
            await self._runner.settle(delivery, ACK)
            next_ = Next.DONE
        else:
            with self._timed(delivery, began):
                next_ = await self._verdicts.result(delivery, message, result)
        self._finish(delivery, next_)

    def _finish(self, delivery: Delivery, next_: Next) -> None:
        if next_ is not Next.DELAYED:  # else the delayed retry finishes it when it fires
            self._channel.finished(delivery)

    @contextlib.contextmanager
    def _timed(self, delivery: Delivery, began: float) -> Iterator[None]:
        """With observers, ``delivery``'s handling began at ``began``, for their record: an
        in-line delivery is timed only off the common path."""
        starts = self._starts
        if starts is None:
            yield
            return
        starts[id(delivery)] = began
        try:
            yield
        finally:
            starts.pop(id(delivery), None)

    # ---- one delivery, the general way -------------------------------------------------------

    async def _process_mortal(self, delivery: Delivery, message: Any = _UNDECODED) -> None:
        """One delivery's handling on a source whose consumer can die (``consumer_can_die``):
        a delivery the dead consumer still had queued is dropped unhandled, and one in a
        handler is cancelled there (:meth:`end_dead`), as the crash would end it."""
        if self._runner.source.died_with_consumer(delivery):
            self._runner.unsettled(delivery, Unsettled.STALE)
            self._channel.finished(delivery)
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope() as scope:
            self._live[id(delivery)] = (delivery, scope)
            try:
                await self._handle_plain(delivery, message)
            finally:
                del self._live[id(delivery)]

    def end_dead(self) -> int:
        """Cancel the handlers of the deliveries the source now says died with its consumer
        (it was killed); returns how many. Their deliveries end unsettled, as a crash leaves
        them."""
        if not self._mortal:
            return 0
        died = self._runner.source.died_with_consumer
        ended = 0
        for delivery, scope in list(self._live.values()):
            if died(delivery):
                scope.cancel()
                ended += 1
        return ended

    async def _process_wrapped(self, delivery: Delivery, message: Any = _UNDECODED) -> None:
        """One delivery's handling inside the middlewares' ``handle`` hooks (outermost first):
        entered before decoding, left once the delivery is settled; the call record is filled
        in as it goes (``Verdicts.observe``)."""
        call = handler_call(self._runner, delivery)
        calls = self._calls
        calls[id(delivery)] = call
        hooks = self._hooks
        try:
            if len(hooks) == 1:  # the common case, without a stack
                async with hooks[0].handle(call):
                    await self._wrapped(delivery, message)
                    call.settled = call.verdict is not None
            else:
                async with AsyncExitStack() as stack:
                    for hook in hooks:
                        await stack.enter_async_context(hook.handle(call))
                    await self._wrapped(delivery, message)
                    call.settled = call.verdict is not None
        finally:
            calls.pop(id(delivery), None)

    async def _handle_payload(self, delivery: Delivery, message: Any = _UNDECODED) -> None:
        """Inside the middlewares' hooks, one delivery of a handler that takes the payload
        alone, as :meth:`_payload_worker` handles it: the common case (current, first attempt,
        no gate, decoded, the handler returns None, an ack that settles nothing or that the
        source settled at once) decided and ended in line, its call record filled as the
        general way fills it (``Verdicts.observe_ack``); everything else the general way, with
        the same outcome for every delivery as :meth:`_process_plain`.

        Cancelled, the delivery is reported abandoned."""
        channel = self._channel
        if (
            message is not _UNDECODED
            or self._gate is not None
            or delivery.attempt != 1
            or not channel.is_current(delivery)
        ):
            await self._process_plain(delivery, message)
            return
        runner = self._runner
        source = runner.source
        began = time.perf_counter()
        try:
            try:
                message = self._handler.decode(delivery.payload)
                if source.counts_runs and not source.record_run(delivery):
                    await source.attempt_started(delivery)
                result = await self._handler.fn(message)
            except BaseException as exc:  # noqa: BLE001 - see _payload_raised
                await self._payload_raised(delivery, message, exc, began)
                return
            if (
                result is None
                and not is_request(delivery)
                and (
                    source.acks_are_noops or (source.acks_in_line and source.ack_in_line(delivery))
                )
            ):
                self._verdicts.observe_ack(delivery, message, began)
                runner.ended_by_noop_ack(delivery)
                channel.finished(delivery)
                return
            with self._timed(delivery, began):
                next_ = await self._verdicts.result(delivery, message, result)
        except BaseException:
            # Cancelled (or failed) before it was settled: it never will be.
            runner.unsettled(delivery, Unsettled.ABANDONED)
            channel.finished(delivery)
            raise
        self._finish(delivery, next_)

    async def _process_plain(self, delivery: Delivery, message: Any = _UNDECODED) -> None:
        """One delivery's handling: passed over if stale or another subscription's retry
        copy, else handled (again and again in an ordered lane that retries in place).

        Cancelled, the delivery is reported abandoned."""
        next_ = Next.DONE
        done = False
        starts = self._starts
        if starts is not None:
            starts.setdefault(id(delivery), time.perf_counter())
        try:
            if not self._channel.is_current(delivery):
                # A seek made it stale before its handler started.
                self._runner.unsettled(delivery, Unsettled.STALE)
            elif self._verdicts.for_another(delivery):
                await self._runner.settle(delivery, ACK)
            else:
                handle = self._handle_delivery
                while (next_ := await handle(delivery, message)) is Next.AGAIN:
                    pass
            done = True
        finally:
            if starts is not None:
                starts.pop(id(delivery), None)
            if not done:
                # Cancelled (or failed) before it was settled: it never will be.
                self._runner.unsettled(delivery, Unsettled.ABANDONED)
            if next_ is not Next.DELAYED:
                self._channel.finished(delivery)

    async def _handle_scoped(self, delivery: Delivery, message: Any) -> Next:
        """``_handle_one`` for a handler with dependencies: they are cleaned up once the
        delivery is settled (or, in an ordered lane that retries in place, once this attempt
        is decided), or when it is cancelled."""
        scope = DependencyScope()
        try:
            next_ = await self._handle_one(delivery, message, scope)
        except BaseException as exc:
            await scope.aclose(exc, self._log, self._runner.label)
            raise
        await scope.aclose(scope.error, self._log, self._runner.label)
        return next_

    async def _handle_one(
        self, delivery: Delivery, message: Any, scope: DependencyScope | None = None
    ) -> Next:
        """Handle ``delivery`` once and carry out the verdict."""
        if delivery.attempt > self._policy.max_attempts:
            return await self._verdicts.spent(delivery)
        if type(message) is KeyRaised:
            return await self._verdicts.unkeyed(delivery, message.error)
        gate = self._gate
        if gate is None:
            return await self._run_one(delivery, message, scope)
        alone = self._runner.source.runs_alone(delivery)
        await (gate.enter_alone() if alone else gate.enter())
        try:
            return await self._run_one(delivery, message, scope)
        finally:
            if alone:
                gate.leave_alone()
            else:
                gate.leave()

    async def _run_one(
        self, delivery: Delivery, message: Any, scope: DependencyScope | None
    ) -> Next:
        """``_handle_one``'s run: counted, the arguments built, the handler called, and the
        verdict carried out."""
        source = self._runner.source
        if source.counts_runs and not source.record_run(delivery):
            await source.attempt_started(delivery)  # counted before its dependencies run
        try:
            args = await self._arguments(delivery, message, scope)
        except DecodeError as exc:
            return await self._verdicts.undecodable(delivery, exc)
        except Exception as exc:  # noqa: BLE001 - a failing extractor or key runs the policy
            return await self._verdicts.failure(
                delivery, None, exc, called=False, ordered=self._ordered
            )
        if not self._channel.is_current(delivery):
            # A seek made it stale while its arguments were being built.
            self._runner.unsettled(delivery, Unsettled.STALE)
            return Next.DONE
        return await self._call(delivery, args, scope)

    async def _arguments(
        self, delivery: Delivery, message: Any, scope: DependencyScope | None
    ) -> list[Any]:
        """The handler's arguments for ``delivery``: its context (only if it takes one), the
        message, the other parameters. What raises is noted as the scope's error."""
        handler = self._handler
        context = Context(self._runner, delivery) if handler.needs_context else None
        if context is not None and self._calls:
            call = self._calls.get(id(delivery))
            if call is not None:
                call.context = context
        try:
            if type(message) is KeyFailed:
                raise message.error
            return await handler.arguments(delivery, context, message, scope)
        except Exception as exc:
            if scope is not None:
                scope.error = exc
            raise

    async def _call(
        self, delivery: Delivery, args: list[Any], scope: DependencyScope | None
    ) -> Next:
        """Call the handler with ``args`` and conclude with its outcome."""
        verdicts = self._verdicts
        error: BaseException | None = None
        try:
            result = await self._handler.fn(*args)
            outcome = await verdicts.outcome_of(result, delivery)
        except Unencodable as exc:
            if scope is not None:
                scope.error = exc.error
            return await verdicts.unencodable(delivery, args[0], exc.error)
        except Exception as exc:  # noqa: BLE001 - a failing handler runs the failure policy
            error = exc
            if scope is not None:
                scope.error = exc
            outcome = verdicts.failed(delivery, exc)
        except BaseException as exc:
            if (stop := self._escaped(exc)) is None:
                raise
            raise stop from exc
        return await verdicts.conclude(delivery, args[0], outcome, error, ordered=self._ordered)

    def _escaped(self, error: BaseException) -> BaseExceptionRaised | None:
        """What the handler raised past the failure policy, as the error that stops the
        subscription: a ``BaseException`` that is not a cancellation (see :mod:`._escapes`).
        None for a cancellation, which goes on as it is."""
        where = f"handler {self._handler.name} of subscription {self._runner.label!r}"
        return escaped(error, where)
