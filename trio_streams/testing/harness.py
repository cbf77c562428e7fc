"""``app.test()``: the production app on in-process transports, with assertions.

Every broker of the app gets a fresh in-process hub, so a test sees only its own messages and a
``FileBroker`` or ``RedisBroker`` app runs without a file or a server. A replay subscription
reads the (empty) stream from the beginning and keeps following it instead of ending at the tip:
the test publishes after the app has started, and the handler must see those messages.

``publish`` returns once the whole reaction has settled: handlers, the messages they published
and the handlers of those, and retries that are due. Time is Trio's, so under pytest-trio's
``autojump_clock`` a ``retry_after(60)`` is tested with ``await t.wait(60)`` in no real time.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, final

import trio
from trio.lowlevel import ParkingLot

from ..core.broker import Broker
from ..core.codec import decoder_for
from ..core.depends import check_overrides
from ..core.destinations import Destination, DestinationKind
from ..core.dispatch import HandledMessage
from ..core.errors import ConfigurationError, TrioStreamsError
from ..core.groups import open_nursery
from ..core.host import Fault, SubscriptionHost
from ..core.outcome import Outcome
from ..core.pipeline import Command, Segment
from ..core.replies import CORRELATION_HEADER, RemoteError
from ..core.requests import DEFAULT_REQUEST_TIMEOUT
from ..core.transport import Transport
from ..memory.broker import MemoryBroker, MemorySubscription, MemoryTransport
from ..memory.channels import channel_bus
from ..memory.log import MemoryHub
from ..memory.queues import MemoryListSubscription, queue_of
from .brokers import broker_for, check_read, check_written

if TYPE_CHECKING:
    from ..core.app import App, RunningApp
    from ..core.subscription import SubscriptionRunner

__all__ = ["HandlerRecord", "NotSettled", "PublishedMessage", "TestClient", "run_test_client"]

DEFAULT_SETTLE_TIMEOUT = 30.0


class NotSettled(TrioStreamsError, TimeoutError):
    """The app did not settle in time; the message lists what was still busy."""


@final
@dataclass(frozen=True, slots=True)
class PublishedMessage:
    """A message as it sits in an in-process stream."""

    stream: str
    seq: int
    payload: bytes
    headers: Mapping[str, str]

    def json(self) -> Any:
        return json.loads(self.payload)

    def decode(self, kind: Any) -> Any:
        """The payload decoded as a handler annotated with ``kind`` would receive it."""
        return decoder_for(kind)(self.payload)


class HandlerRecord:
    """What became of each delivery of one handler's subscription, in order.

    ``records`` holds every delivery the subscription handled; ``calls`` those the handler was
    called with; ``skipped`` those it was not: a payload that could not be decoded, a message
    the subscription's ``by_key`` raised on, or a delivery already tried ``max_attempts`` times
    (its ``verdict`` says what became of it).
    """

    def __init__(
        self, name: str, records: list[HandledMessage], segments: list[Segment] | None = None
    ) -> None:
        self.name = name
        self.records = records
        #: Every pipeline-window segment of the subscription, kept or not (``pipeline=True``).
        self.segment_records: list[Segment] = segments or []

    @property
    def segments(self) -> list[list[Command]]:
        """The commands of each kept segment (outcome ``ack``), in commit order, as the window
        sends them: ``[[("INCRBYFLOAT", "total:1", "2.0")]]``."""
        return [list(s.commands) for s in self.segment_records if s.kept]

    @property
    def discarded_segments(self) -> list[list[Command]]:
        """The commands of each segment the window discarded (any outcome but ``ack``, or a
        delivery that ended unsettled)."""
        return [list(s.commands) for s in self.segment_records if not s.kept]

    @property
    def calls(self) -> list[HandledMessage]:
        """The deliveries the handler was called with."""
        return [record for record in self.records if record.called]

    @property
    def skipped(self) -> list[HandledMessage]:
        """The deliveries settled without calling the handler (undecodable, ``by_key`` raised
        on them, or spent)."""
        return [record for record in self.records if not record.called]

    @property
    def messages(self) -> list[Any]:
        """The decoded payloads the handler was called with."""
        return [call.message for call in self.calls]

    @property
    def outcomes(self) -> list[Outcome]:
        """What the handler returned, or what the failure policy made of its exception."""
        return [call.outcome for call in self.calls]

    @property
    def settled(self) -> list[Outcome]:
        """What was settled for every delivery, after the attempts cap (a spent retry settles as
        ``drop()``), skipped ones included."""
        return [record.verdict.outcome for record in self.records]

    @property
    def dead_lettered(self) -> list[HandledMessage]:
        """Every delivery sent to the dead letter, skipped ones included."""
        return [record for record in self.records if record.verdict.dead_letter is not None]

    @property
    def errors(self) -> list[BaseException]:
        """Every error: the handler's, an extractor's, ``by_key``'s, or why a payload could not
        be decoded."""
        return [record.error for record in self.records if record.error is not None]

    @property
    def call_count(self) -> int:
        """How many times the handler was called."""
        return len(self.calls)

    def assert_called_once_with(self, message: Any) -> None:
        assert len(self.calls) == 1, f"{self.name} was called {len(self.calls)} times, not once"
        got = self.calls[0].message
        assert got == message, f"{self.name} was called with {got!r}, not {message!r}"

    def assert_not_called(self) -> None:
        assert not self.calls, f"{self.name} was called {len(self.calls)} times: {self.messages!r}"

    def __repr__(self) -> str:
        return (
            f"<HandlerRecord {self.name} {self.call_count} call(s), {len(self.records)} record(s)>"
        )


#: How often (s, Trio's clock) ``settled`` looks again without a notification.
_RECHECK = 0.25


class _Changes:
    """A wake-up for the harness whenever anything that bears on "settled" moves."""

    def __init__(self) -> None:
        self._lot = ParkingLot()

    def notify(self) -> None:
        self._lot.unpark_all()

    async def wait(self) -> None:
        await self._lot.park()


class TestClient:
    """The handle ``app.test()`` yields."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        app: App,
        running: RunningApp,
        hubs: Mapping[Broker, MemoryHub],
        runners: list[SubscriptionRunner],
        calls: dict[str, list[HandledMessage]],
        changes: _Changes,
        settle_timeout: float,
        raise_errors: bool,
        history: list[HandledMessage],
        faults: list[Fault],
    ) -> None:
        self.app = app
        #: Every fault a source reported or raised, and every clearing of one, in order.
        self.faults = faults
        self.settle_timeout = settle_timeout
        #: Re-raise, from ``publish``/``settled``, the first handler error since the last call.
        self.raise_errors = raise_errors
        self._history = history
        self._checked = 0
        self.running = running
        self._hubs = hubs
        self._runners = runners
        self._calls = calls
        self._changes = changes

    # ---- acting ------------------------------------------------------------------------------

    async def publish(
        self,
        destination: str | Destination,
        message: Any,
        *,
        headers: Mapping[str, str] | None = None,
        broker: Broker | None = None,
        unread_ok: bool = False,
    ) -> Any:
        """Publish, then wait until the whole reaction has settled; returns the receipt.

        ``destination`` is a stream (a ``str``), or a ``Destination`` (a Redis list or channel:
        ``Destination.list("jobs")``, ``Destination.channel("news")``). With several brokers,
        it is on the one that reads, publishes or dead-letters to it; ``broker=`` says which
        where more than one does, or none (:mod:`trio_streams.testing.brokers`).

        A destination no subscription of the app reads is refused (``ConfigurationError``,
        listing the names it reads, the closest first): a typo would otherwise publish where
        nothing listens and the test would pass. ``unread_ok=True`` publishes there anyway (a
        test that checks nobody handles it)."""
        target = self._broker_for(destination, broker)
        if not unread_ok:
            # A name the broker refuses is refused as such first.
            check_read(
                self.app.name, self.app.brokers, target, target.check_destination(destination)
            )
        receipt = await target.publish(destination, message, headers=headers)
        await self.settled()
        return receipt

    async def request(
        self,
        destination: str | Destination,
        message: Any,
        *,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,  # noqa: ASYNC109 - as broker.request's
        headers: Mapping[str, str] | None = None,
        reply_type: Any = None,
        broker: Broker | None = None,
        unread_ok: bool = False,
    ) -> Any:
        """Send a request and return its reply, as ``broker.request`` does live (the same
        errors: :class:`~trio_streams.core.replies.RemoteError`,
        :class:`~trio_streams.core.requests.RequestTimeout` on Trio's clock, ...), then wait
        until the rest of the reaction has settled. The destination is chosen and checked as
        :meth:`publish` does (a destination nothing reads is refused unless ``unread_ok``).
        With ``raise_errors``, a handler's failure is raised as the ``RemoteError`` it answered,
        once, not again by the next call; the failed attempts of a request that then succeeded
        are its own story, told by its reply, and not raised either. Errors of the rest of the
        reaction are raised as :meth:`settled` raises them."""
        target = self._broker_for(destination, broker)
        if not unread_ok:
            check_read(
                self.app.name, self.app.brokers, target, target.check_destination(destination)
            )
        try:
            reply = await target.request(message, destination, timeout=timeout, headers=headers)
        except RemoteError:
            # The handler's failure is reported as this error: with ``raise_errors`` the next
            # call does not raise it again.
            await self._settle()
            self._checked = len(self._history)
            raise
        await self._settle()
        fresh = self._history[self._checked :]
        self._checked = len(self._history)
        if self.raise_errors:
            for call in fresh:
                own = call.delivery.headers.get(CORRELATION_HEADER) == reply.correlation_id
                if call.error is not None and not own:
                    raise call.error
        return reply if reply_type is None else reply.decode(reply_type)

    async def settled(self) -> None:
        """Wait until nothing is left to read, nothing is in flight and no retry is due (nor
        any reply to a request of the app's brokers is left unread: a late one is counted).

        Woken by every change the runners report; it also looks again every
        ``_RECHECK`` s of Trio's clock, so a change that reached no notification (a settle that
        ended in a task the harness does not hear from) costs a fraction of a second, never the
        whole ``settle_timeout``."""
        await self._settle()
        if self.raise_errors:
            fresh = self._history[self._checked :]
            self._checked = len(self._history)
            for call in fresh:
                if call.error is not None:
                    raise call.error

    async def _settle(self) -> None:
        """:meth:`settled`'s wait, raising no handler error."""
        with trio.move_on_after(self.settle_timeout) as waiting:
            while not self._quiet():
                deadline = min(self._next_deadline(), trio.current_time() + _RECHECK)
                with trio.move_on_at(deadline):
                    await self._changes.wait()
        if waiting.cancelled_caught:
            raise NotSettled(f"not settled after {self.settle_timeout}s: {self._busy()}")

    async def wait(self, seconds: float) -> None:
        """Let ``seconds`` pass on Trio's clock (instantly under autojump_clock), then settle."""
        await trio.sleep(seconds)
        await self.settled()

    # ---- looking -----------------------------------------------------------------------------

    def handler(self, handler: Callable[..., Any] | str) -> HandlerRecord:
        """The record of a handler, by function or by subscription name."""
        names = [
            runner.label
            for runner in self._runners
            if handler in (runner.label, runner.subscription.handler.fn)
        ]
        if not names:
            known = [runner.label for runner in self._runners]
            raise ConfigurationError(f"no subscription runs {handler!r}; these do: {known}")
        calls = [call for name in names for call in self._calls.get(name, [])]
        label = names[0] if len(names) == 1 else ", ".join(names)
        wanted = set(names)
        segments = [
            s for hub in self._hubs.values() for s in hub.segments if s.subscription in wanted
        ]
        return HandlerRecord(label, calls, segments)

    def report_fault(self, handler: Callable[..., Any] | str, kind: str, message: str) -> None:
        """Make the source of ``handler``'s subscription report a fault, as a server transport
        does when it loses its connection: health is degraded until :meth:`clear_fault`, and the
        fault is recorded in :attr:`faults` (and counted in the subscription's stats)."""
        self._host(handler).report_fault(kind, message)

    def clear_fault(self, handler: Callable[..., Any] | str, kind: str) -> None:
        """The fault :meth:`report_fault` began is over."""
        self._host(handler).clear_fault(kind)

    def kill_consumer(self, handler: Callable[..., Any] | str) -> int:
        """The consumer of ``handler``'s list or consumer-group subscription dies, and a reaper
        (or a reclaim) runs: what a reliable list's consumer or a group member holds (taken, not
        yet settled) goes back, to the front of the list or the group's pending entries, and is
        delivered again; its handlers are cancelled where they are, and what it had read but not
        handed to a handler is dropped, as a crash ends them. Each entry's attempt counts the
        handler runs it had, never its reads: what no handler started goes back uncharged. A
        simple list's consumer loses what it holds (nothing goes back). Returns how many
        entries went back. The subscription itself keeps reading, as a restarted consumer
        would."""
        for runner in self._runners:
            if handler in (runner.label, runner.subscription.handler.fn):
                source = runner.source
                if source.consumer_can_die and isinstance(
                    source, MemoryListSubscription | MemorySubscription
                ):
                    moved = source.kill()
                    if runner.dispatcher is not None:
                        runner.dispatcher.end_dead()  # its handlers die with it
                    return moved
                raise ConfigurationError(
                    f"{runner.label} reads neither a list nor a consumer group, so it has no "
                    "consumer to kill"
                )
        known = [runner.label for runner in self._runners]
        raise ConfigurationError(f"no running subscription runs {handler!r}; these do: {known}")

    def _host(self, handler: Callable[..., Any] | str) -> SubscriptionHost:
        for runner in self._runners:
            if handler in (runner.label, runner.subscription.handler.fn) and runner.host:
                return runner.host
        known = [runner.label for runner in self._runners]
        raise ConfigurationError(f"no running subscription runs {handler!r}; these do: {known}")

    def published(
        self,
        destination: str | Destination,
        *,
        broker: Broker | None = None,
        unwritten_ok: bool = False,
    ) -> list[PublishedMessage]:
        """Every message in ``destination``, from tests and handlers alike, in order (for a
        channel, ``Destination.channel(name)``: what was published to it, heard or not; for a
        list, ``Destination.list(name)``: every entry ever pushed, retry copies included, taken
        or not; ``seq`` counts them from 1). The broker is found as for :meth:`publish`.

        A destination that nothing of the app reads, publishes or dead-letters to, and to which
        nothing was published, is refused (``ConfigurationError``, listing the names the app
        knows, the closest first): ``t.published("reciepts") == []`` would otherwise pass.
        ``unwritten_ok=True`` looks anyway (a name only a handler's ``ctx.publish`` makes)."""
        target = Destination.of(destination)
        owner = self._broker_for(target, broker)
        messages = self._messages(self._hubs[owner], target)
        if not messages and not unwritten_ok:
            check_written(self.app.name, self.app.brokers, target)
        return messages

    @staticmethod
    def _messages(hub: MemoryHub, target: Destination) -> list[PublishedMessage]:
        """What ``hub`` holds of ``target``, in order."""
        if target.is_channel:
            bus = channel_bus(hub, sharded=target.kind is DestinationKind.SHARD_CHANNEL)
            return [
                PublishedMessage(target.name, e.seq, e.payload, e.headers)
                for e in bus.messages(target.name)
            ]
        if target.kind is DestinationKind.LIST:
            queue = queue_of(hub, target.name)
            return [
                PublishedMessage(target.name, n, e.payload, e.headers)
                for n, e in enumerate(queue.pushed, 1)
            ]
        log = hub.log(target.name)
        return [
            PublishedMessage(target.name, e.seq, e.payload, e.headers)
            for e in log.slice(log.first_seq, log.next_seq)
        ]

    def segments(self, handler: Callable[..., Any] | str) -> list[Segment]:
        """What became of the pipeline-window segments of ``handler``'s subscription
        (``pipeline=True``): each delivery whose handler queued commands through
        ``ctx.pipeline``, with the commands, whether they were kept (``ack``) or discarded, and
        what decided it."""
        labels = {
            runner.label
            for runner in self._runners
            if handler in (runner.label, runner.subscription.handler.fn)
        }
        if not labels:
            known = [runner.label for runner in self._runners]
            raise ConfigurationError(f"no subscription runs {handler!r}; these do: {known}")
        return [s for hub in self._hubs.values() for s in hub.segments if s.subscription in labels]

    def hub(self, broker: Broker) -> MemoryHub:
        return self._hubs[broker]

    # ---- internals ---------------------------------------------------------------------------

    def _broker_for(self, destination: str | Destination, broker: Broker | None) -> Broker:
        return broker_for(self.app.name, list(self._hubs), destination, broker)

    def _quiet(self) -> bool:
        return all(runner.quiescent() for runner in self._runners) and not any(
            broker.unread_replies for broker in self._hubs
        )

    def _next_deadline(self) -> float:
        return min((r.next_deadline() for r in self._runners), default=float("inf"))

    def _busy(self) -> str:
        busy = [
            f"{r.label} (in flight {r.channel.outstanding}, unread {r.source.unread()}, "
            f"delayed {len(r.delayed) + len(r.lane_delays)})"
            for r in self._runners
            if not r.quiescent()
        ]
        busy += [
            f"{broker.name}: replies (unread {broker.unread_replies})"
            for broker in self._hubs
            if broker.unread_replies
        ]
        return "; ".join(busy) or "nothing (it settled just now)"


@asynccontextmanager
async def run_test_client(
    app: App,
    *,
    settle_timeout: float = DEFAULT_SETTLE_TIMEOUT,
    raise_errors: bool = False,
    dependency_overrides: Mapping[Callable[..., Any], Callable[..., Any]] | None = None,
) -> AsyncIterator[TestClient]:
    from ..core.app import RunOptions

    overrides = dict(dependency_overrides or {})
    check_overrides([s.handler for b in app.brokers for s in b.subscriptions], overrides)

    hubs = {broker: MemoryHub() for broker in app.brokers}
    changes = _Changes()
    calls: dict[str, list[HandledMessage]] = {}
    history: list[HandledMessage] = []
    faults: list[Fault] = []

    def record(call: HandledMessage) -> None:
        calls.setdefault(call.subscription, []).append(call)
        history.append(call)

    def connect(broker: Broker) -> AbstractAsyncContextManager[Transport]:
        return _in_process(hubs[broker], broker)

    for hub in hubs.values():
        hub.add_listener(changes.notify)
    options = RunOptions(
        connect=connect,
        shutdown_timeout=app.shutdown_timeout,
        stop_when_finished=False,
        observers=(record,),
        fault_observers=(faults.append,),
        on_change=changes.notify,
        dependency_overrides=overrides,
    )
    # A lone error (a failed assert of the test, a failure of the app) leaves as itself.
    async with open_nursery() as nursery:
        running: RunningApp = await nursery.start(app.serve_with, options)
        client = TestClient(
            app,
            running,
            hubs,
            options.runners,
            calls,
            changes,
            settle_timeout,
            raise_errors,
            history,
            faults,
        )
        try:
            yield client
        finally:
            await running.aclose()


@asynccontextmanager
async def _in_process(hub: MemoryHub, broker: Broker) -> AsyncIterator[Transport]:
    yield MemoryTransport(
        hub,
        strict_options=isinstance(broker, MemoryBroker),
        follow_replays=True,
        segment_check=broker.segment_check,
    )
