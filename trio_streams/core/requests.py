"""The caller's side of request-reply: ``await broker.request(message, destination)``.

Each connected broker has at most one **reply inbox**: a subscription of its transport's own
kind to a reply address of this broker instance (a Redis Pub/Sub channel, an in-process
channel, a key of the stream file), opened at the first request and kept until the broker
closes. Every request in flight waits on it for the reply that carries its correlation id, so
ten thousand requests in flight cost one subscription and a dict entry each.

- The inbox is subscribed (the server confirmed it) before the first request is published, so
  a reply cannot arrive before anyone listens.
- A reply whose request is no longer waiting (it timed out, or its caller was cancelled) is
  dropped and counted (:attr:`ReplyInbox.late`), never handed to a later request: every
  request has its own correlation id.
- A fault of the inbox's subscription (its connection lost: replies published meanwhile are
  gone, as Pub/Sub keeps nothing) fails every request in flight at once with
  :class:`ReplyLost`, instead of letting each wait out its timeout; the subscription recovers on
  its own for the next requests, which wait (within their timeout) until it has subscribed
  again before they publish: a reply sent while it is deaf would be lost. An inbox that fails
  outright ends, and the next request opens another.

The inbox's task belongs to the broker's own nursery (``Broker.lifetime``), so it ends when the
broker closes; a request's wait belongs to its caller: cancelling the caller removes the
request from the inbox and leaves nothing behind.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, final

import trio

from .errors import TrioStreamsError
from .groups import open_nursery
from .host import Fault, SubscriptionHost
from .outcome import ack
from .replies import CORRELATION_HEADER, Reply
from .transport import SourceFault, SubscriptionSource

if TYPE_CHECKING:
    from .routing import SubscriberOptions

__all__ = [
    "DEFAULT_REQUEST_TIMEOUT",
    "NoResponders",
    "PendingRequest",
    "ReplyInbox",
    "ReplyLost",
    "RequestTimeout",
    "new_correlation_id",
]

#: How long ``broker.request`` waits for a reply unless told (seconds).
DEFAULT_REQUEST_TIMEOUT: Final = 10.0

_ACK = ack()
_log = logging.getLogger("trio_streams.requests")


class RequestTimeout(TrioStreamsError, trio.TooSlowError):
    """No reply came within the request's timeout. A ``trio.TooSlowError``, so code written
    for ``trio.fail_after`` catches it too. ``why`` says what the transport could tell (the
    stream has no consumer group, say), or is empty."""

    def __init__(
        self, destination: str, timeout: float, correlation_id: str, why: str = ""
    ) -> None:
        self.destination = destination
        self.timeout = timeout
        self.correlation_id = correlation_id
        self.why = why
        super().__init__(
            f"no reply to the request to {destination} within {timeout:g}s "
            f"(correlation id {correlation_id})" + (f": {why}" if why else "")
        )


@final
class NoResponders(RequestTimeout):
    """The transport told at once that nobody received the request (a Pub/Sub ``PUBLISH``
    that reached no subscriber): raised without waiting out the timeout."""

    def __init__(
        self, destination: str, timeout: float, correlation_id: str, why: str = ""
    ) -> None:
        super().__init__(destination, timeout, correlation_id, why)
        # Said as what happened: nothing was waited for.
        self.args = (
            f"nobody received the request to {destination} (correlation id {correlation_id})"
            + (f": {why}" if why else ""),
        )


@final
class ReplyLost(TrioStreamsError):
    """The subscription a request's reply would come on lost its connection (or failed) while
    the request waited: a reply sent meanwhile cannot arrive. Raised at once, not at the
    timeout. The request itself may have been handled: a request is not a transaction."""


def new_correlation_id() -> str:
    return uuid.uuid4().hex


@final
class PendingRequest:
    """One request in flight: set once, with its reply or the error it fails with."""

    __slots__ = ("error", "event", "publishing", "reply")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.reply: Reply | None = None
        self.error: BaseException | None = None
        #: The scope of the request's publish while it runs: failing the request cancels it
        #: (a publish to a server that hangs would otherwise hold it until its timeout).
        self.publishing: trio.CancelScope | None = None


@final
class ReplyInbox:
    """The requests in flight of one broker, and the subscription their replies come on."""

    def __init__(self, address: str, label: str) -> None:
        #: The reply address requests carry in ``x-trio-streams-reply-to``.
        self.address = address
        self.label = label
        self._waiting: dict[str, PendingRequest] = {}
        #: Replies that came for no request waiting (late, or answered twice): dropped.
        self.late = 0
        #: Replies handed to their request.
        self.replied = 0
        #: Set once the inbox has stopped reading; requests then need a new inbox.
        self.closed = False
        #: The faults of the reply subscription that last now, by kind: while any does, a
        #: reply may be missed, so no request is published (:attr:`listening`).
        self._faults: dict[str, str] = {}
        #: Set (and replaced) at each change of :attr:`listening` or :attr:`closed`.
        self._changed = trio.Event()
        #: The subscription replies come on, while :meth:`run` reads it.
        self._source: SubscriptionSource | None = None

    @property
    def in_flight(self) -> int:
        return len(self._waiting)

    @property
    def listening(self) -> bool:
        """Open and subscribed, no fault lasting: a reply published now will arrive."""
        return not self.closed and not self._faults

    def deafness(self) -> str:
        """Why the inbox is not listening now (its lasting faults), or empty."""
        return "; ".join(f"{kind}: {message}" for kind, message in self._faults.items())

    async def changed(self) -> None:
        """Wait for the next change of :attr:`listening` or :attr:`closed`."""
        await self._changed.wait()

    def _change(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def unread(self) -> int:
        """Replies that have arrived and are not read yet, where the source can tell (what
        ``app.test()`` waits for before it calls the app settled)."""
        source = self._source
        return 0 if source is None or self.closed else source.unread()

    def expect(self, correlation_id: str) -> PendingRequest:
        """Register a request before it is published; :meth:`forget` it in a ``finally``."""
        if self.closed:
            raise ReplyLost(f"{self.label}: the reply subscription has ended")
        waiting = PendingRequest()
        self._waiting[correlation_id] = waiting
        return waiting

    def forget(self, correlation_id: str) -> None:
        self._waiting.pop(correlation_id, None)

    def deliver(self, payload: bytes, headers: Mapping[str, str]) -> None:
        """Hand one reply to its request, or count it late."""
        correlation_id = headers.get(CORRELATION_HEADER)
        waiting = None if correlation_id is None else self._waiting.pop(correlation_id, None)
        if waiting is None or correlation_id is None:
            self.late += 1
            _log.debug(
                "%s: reply %s dropped: no request waits for it (late, or answered twice)",
                self.label,
                correlation_id,
            )
            return
        waiting.reply = Reply(payload, headers, correlation_id)
        self.replied += 1
        waiting.event.set()

    def fail_all(self, error: BaseException) -> None:
        """Fail every request in flight with ``error`` (each gets it raised at once)."""
        waiting, self._waiting = self._waiting, {}
        for request in waiting.values():
            request.error = error
            request.event.set()
            if request.publishing is not None:
                request.publishing.cancel()

    def on_fault(self, fault: Fault) -> None:
        """The reply subscription reported a fault: while it lasts replies may be lost, so the
        requests waiting now fail, and new ones wait until it clears (a reconnect that has
        subscribed again) before they publish; a fault that clears fails nothing."""
        if fault.cleared:
            if self._faults.pop(fault.kind, None) is not None and not self._faults:
                self._change()
            return
        if not self._faults:
            self._change()
        self._faults[fault.kind] = fault.message
        if not self._waiting:
            return
        self.fail_all(
            ReplyLost(
                f"{self.label}: the reply subscription failed ({fault.kind}): {fault.message}"
            )
        )

    async def run(
        self,
        source: SubscriptionSource,
        options: SubscriberOptions,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Open ``source`` (subscribed, once this is started), then read replies from it until
        cancelled (the broker closing). An error of ``open`` is the starter's; any later
        failure fails the requests in flight and closes the inbox, and never escapes: it
        would take the broker's nursery, and the app, down with it. Cancelled, it closes the
        source (shielded, at most 5 s)."""
        started = False
        try:
            async with open_nursery() as nursery:  # an error of open leaves as itself
                host = SubscriptionHost(
                    self.label, options, nursery, logger=_log, on_fault=self.on_fault
                )
                try:
                    await source.open(host)
                    self._source = source
                    task_status.started()
                    started = True
                    await self._read(source, host)
                finally:
                    nursery.cancel_scope.cancel()
                    with trio.CancelScope(shield=True), trio.move_on_after(5):
                        await source.aclose()
        except Exception as exc:
            if not started:
                raise
            _log.warning("%s: the reply subscription failed: %r", self.label, exc)
            self.closed = True
            self.fail_all(ReplyLost(f"{self.label}: the reply subscription failed: {exc!r}"))
        finally:
            self.closed = True
            self._change()
            self.fail_all(ReplyLost(f"{self.label}: the reply subscription ended"))

    async def _read(self, source: SubscriptionSource, host: SubscriptionHost) -> None:
        """Hand each reply to its request; a read's fault is reported (failing the requests in
        flight) and the read tried again after a pause from 1 ms doubling to 1 s."""
        pause = 0.0
        while True:
            batch = source.poll()
            if not batch:
                try:
                    read = await source.read()
                except SourceFault as fault:
                    host.report_fault(fault.kind, fault.message, error=fault.__cause__)
                    pause = min(1.0, pause * 2 or 0.001)
                    await trio.sleep(pause)
                    continue
                if pause:
                    pause = 0.0
                    for kind in list(host.active):
                        host.clear_fault(kind)
                if read is None:
                    return  # a source that ended: nothing more can come
                batch = read
            # Every reply of the batch is handed over before the first settle's checkpoint: a
            # reply is either unread at the source or with its request, never in between.
            for delivery in batch:
                self.deliver(delivery.payload, delivery.headers)
            for delivery in batch:
                await source.settle(delivery, _ACK)
