"""``Broker``: where subscriptions are mounted, and the handle a running app publishes through.

A broker is declared at import time (``FileBroker("orders.ss")``, ``RedisBroker(url)``) and
registered on an app (``app.broker(...)``). While the app runs, the broker holds a connected
``Transport``; under ``app.test()`` it holds an in-process one instead, so the same handlers,
publishers and ``broker.publish`` calls run without any server.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack, asynccontextmanager
from types import TracebackType
from typing import Any, ClassVar, Self, TypeVar, overload

import trio

from .codec import encode
from .description import BrokerDescription
from .destinations import Destination, DestinationKind
from .errors import ConfigurationError, TrioStreamsError, UnsupportedError
from .groups import open_nursery
from .middleware import (
    Middleware,
    PublishCall,
    RequestCall,
    broker_kind,
    publish_hooks,
    request_hooks,
    run_request,
)
from .pipeline import CommandCheck
from .process import process_name
from .replies import CORRELATION_HEADER, ERROR_HEADER, REPLY_TO_HEADER, RemoteError, Reply
from .requests import (
    DEFAULT_REQUEST_TIMEOUT,
    NoResponders,
    PendingRequest,
    ReplyInbox,
    RequestTimeout,
    new_correlation_id,
)
from .routing import Declared, Router, SubscriberOptions, Subscription
from .transport import Source, Transport

T = TypeVar("T")

__all__ = ["Broker", "NotConnected"]


class NotConnected(TrioStreamsError):
    """A broker was used to publish while it was not connected: neither its app was running
    nor was it entered (``async with broker:``)."""


class Broker(Router):
    """Base class of every broker. Subclasses say what they connect to and what they accept."""

    #: Source types this broker can subscribe to.
    source_types: ClassVar[tuple[type[Source], ...]] = ()
    #: Transport-specific subscriber options this broker understands.
    subscriber_options: ClassVar[frozenset[str]] = frozenset()
    #: The kinds of destination this broker publishes to (every transport has streams).
    destination_kinds: ClassVar[frozenset[DestinationKind]] = frozenset({DestinationKind.STREAM})
    #: Its kind, as middlewares see it (``redis``, ``file``, ``memory``); empty: its class name.
    kind: ClassVar[str] = ""

    def __init__(self, *, name: str | None = None, prefix: str = "", **defaults: Any) -> None:
        super().__init__(prefix=prefix, **defaults)
        self.name = name or type(self).__name__
        self._subscriptions: list[Subscription] = []
        self._transport: Transport | None = None
        #: Its ``messaging.system``, from its description at the first publish a middleware wraps.
        self._system: str | None = None
        #: The middlewares of the app this broker is registered on (set by ``App.broker``).
        self.app_middlewares: tuple[Middleware, ...] = ()
        #: Whether an app has registered this broker (``App.broker``): ``trio-streams run``
        #: refuses a module whose broker has subscribers but was never registered.
        self.registered = False
        #: The broker's own tasks (the reply inbox) while it is connected.
        self._nursery: trio.Nursery | None = None
        #: The reply inbox of the requests this broker makes, opened at the first.
        self._inbox: ReplyInbox | None = None
        self._opening_inbox: trio.Event | None = None
        #: Late replies of the inboxes this connection had before its current one.
        self._late_earlier = 0
        #: Connected, or connecting: held from the start of :meth:`lifetime` to its end.
        self._connected = False
        #: ``async with broker:``'s connection, while it is entered.
        self._entered: AbstractAsyncContextManager[Self] | None = None

    # ---- what subclasses provide -------------------------------------------------------------

    @abstractmethod
    def connect(self) -> AbstractAsyncContextManager[Transport]:
        """Connect to the real thing; the context closes it."""

    def check_installed(self) -> None:
        """Refuse, with :class:`~trio_streams.core.extras.MissingExtra`, a broker whose optional
        dependency is missing: called before an app connects (``app.run()``, ``trio-streams
        run``), never under ``app.test()``, which connects to nothing. None by default."""

    def description(self) -> BrokerDescription:
        """What this broker says of itself to documents and traces (see
        :mod:`~trio_streams.core.description`), from what it was declared with. By default:
        its kind, ``trio_streams.<kind>``, an in-process server (the in-process broker's own
        description) and no bindings."""
        kind = broker_kind(self)
        return BrokerDescription(
            kind=kind,
            system=f"trio_streams.{kind}",
            server={
                "host": "localhost",
                "protocol": "in-process",
                "description": f"{self.name}: in-process streams of one process",
            },
        )

    def check_subscription(self, source: Source, options: Mapping[str, Any]) -> None:
        """Refuse, with ``UnsupportedError``, what this broker's transport cannot do."""
        if self.source_types and not isinstance(source, self.source_types):
            accepted = ", ".join(t.__name__ for t in self.source_types)
            raise UnsupportedError(
                f"{self.name} cannot subscribe to {source!r}; it reads {accepted}"
            )
        unknown = set(options) - self.subscriber_options
        if unknown:
            raise UnsupportedError(
                f"{self.name} does not understand subscriber option(s) {sorted(unknown)}"
            )

    def segment_check(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> CommandCheck | None:
        """The check each command queued on a pipeline-window segment of this subscription
        passes (raising refuses it), or None for no check. Used by the broker's own transport
        and by the in-process window under ``app.test()``, so both refuse the same commands."""
        del source, options, label
        return None

    # ---- mounting ----------------------------------------------------------------------------

    @property
    def subscriptions(self) -> list[Subscription]:
        return list(self._subscriptions)

    def broker_or_none(self) -> Broker:
        return self

    def source_for(self, name: str) -> Source:
        """The source a plain stream name subscribes to (``@broker.subscriber("orders")``): this
        transport's default subscription of that name, as its guide documents it. ``name`` has
        the prefixes of the routers it came through, not yet this broker's own. Refuses, with
        ``ConfigurationError``, a name the transport cannot read. A broker with no default
        subscription (the base class) refuses every name."""
        accepted = ", ".join(f"{t.__name__}(...)" for t in self.source_types) or "a source"
        raise UnsupportedError(
            f"{self.name} has no default subscription for a plain name: give a source "
            f"({accepted}), not {name!r}"
        )

    def prepare(self, declared: Declared) -> None:
        """Fill in, on ``declared`` (a subscriber reaching this broker, its routers' prefixes
        applied), what this broker adds before it is checked and mounted (a default consumer
        group, say), or refuse it. Nothing by default."""

    def _on_declared(self, declared: Declared) -> None:
        declared.source = self._named(declared)
        self.prepare(declared)
        source = declared.source.with_prefix(self.prefix)
        self.check_subscription(source, declared.transport_options)
        if declared.handler.seeks and not source.seekable:
            raise UnsupportedError(
                f"handler {declared.handler.name} takes a Seeker, but {source!r} cannot seek"
            )
        if declared.handler.pipelines and not declared.transport_options.get("pipeline"):
            raise UnsupportedError(
                f"handler {declared.handler.name} takes a Pipeline, but its subscription to "
                f"{source!r} has no pipeline window: mount it with pipeline=True"
                + (
                    ""
                    if "pipeline" in self.subscriber_options
                    else f" on a transport that has one ({self.name} has none)"
                )
            )
        dead_letter = declared.options.policy.dead_letter
        if dead_letter is not None:
            if not dead_letter:
                raise ConfigurationError("dead_letter must name a destination")
            try:
                self.check_destination(dead_letter)
            except TrioStreamsError as exc:
                raise type(exc)(f"handler {declared.handler.name}: dead_letter: {exc}") from None
            if source.reads_dead_letter(dead_letter):
                raise ConfigurationError(
                    f"handler {declared.handler.name}: dead_letter {dead_letter!r} is read by "
                    f"its own subscription ({source!r}), so every dead letter would come back, "
                    "fail again and be dead-lettered again, forever: name another destination"
                )
        names = {s.name for s in self._subscriptions}
        name = declared.name
        if name in names:
            suffix = 2
            while f"{name}#{suffix}" in names:
                suffix += 1
            name = f"{name}#{suffix}"
        self._subscriptions.append(
            Subscription(
                broker=self,
                source=source,
                handler=declared.handler,
                options=declared.options,
                transport_options=declared.transport_options,
                name=name,
                middlewares=self.middlewares + declared.middlewares,
            )
        )

    def _named(self, declared: Declared) -> Source:
        """``declared``'s source; a plain name made this broker's default source of it."""
        given = declared.source
        if not isinstance(given, str):
            return given
        try:
            return self.source_for(given)
        except ConfigurationError as exc:
            kind = UnsupportedError if isinstance(exc, UnsupportedError) else ConfigurationError
            raise kind(
                f"handler {declared.handler.name}: subscriber({given!r}) on {self.name}: {exc}"
            ) from exc

    # ---- while running -----------------------------------------------------------------------

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            raise NotConnected(
                f"{self.name} is not connected: run its app, or enter it (async with broker:)"
            )
        return self._transport

    @asynccontextmanager
    async def lifetime(
        self, connecting: AbstractAsyncContextManager[Transport]
    ) -> AsyncIterator[Self]:
        """Connect with ``connecting`` (the broker's :meth:`connect`, or the in-process
        transport of ``app.test()``) and hold the transport until the block ends, with a nursery
        for the broker's own tasks (the reply inbox). An app enters each of its brokers this way;
        ``async with broker:`` does too. Leaving it cancels those tasks (requests still waiting
        fail with :class:`~trio_streams.core.requests.ReplyLost`), then closes the transport."""
        if self._connected:
            raise ConfigurationError(
                f"{self.name} is already connected (its app is running, or it was entered): "
                "a broker holds one connection at a time"
            )
        # Claimed before the first await: two entered at once cannot both connect.
        self._connected = True
        try:
            # A lone error of the block (or of the broker's tasks) leaves as itself.
            async with connecting as transport, open_nursery() as nursery:
                self._attach(transport)
                self._nursery = nursery
                try:
                    yield self
                finally:
                    nursery.cancel_scope.cancel()
                    self._nursery = None
                    self._inbox = None
                    self._opening_inbox = None
                    self._attach(None)
        finally:
            self._connected = False

    async def __aenter__(self) -> Self:
        """Connect without an app, to publish and request from a script or a test:
        ``async with RedisBroker(url) as broker: await broker.publish(...)``. Subscribers are
        not run (an app runs them); the errors are an app's (a server that refuses, a missing
        extra). Entering a broker that is connected already is refused."""
        self.check_installed()
        entered = self.lifetime(self.connect())
        await entered.__aenter__()
        self._entered = entered
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool | None:
        entered, self._entered = self._entered, None
        if entered is None:
            return None
        return await entered.__aexit__(exc_type, exc, traceback)

    def _attach(self, transport: Transport | None) -> None:
        self._transport = transport

    def check_destination(self, destination: str | Destination) -> Destination:
        """``destination`` as a ``Destination``; ``UnsupportedError`` if this broker's transport
        has no such kind of destination (a list or a channel where there are only streams)."""
        target = Destination.of(destination)
        if target.kind not in self.destination_kinds:
            kinds = ", ".join(sorted(k.value for k in self.destination_kinds))
            raise UnsupportedError(
                f"{self.name} cannot publish to {target.kind.value} {target.name!r}; "
                f"it has: {kinds}"
            )
        self.check_name(target)
        return target

    def check_name(self, destination: Destination) -> None:
        """Refuse, with ``ConfigurationError``, a name the transport cannot publish to (a stream
        file's key rules, say). Called wherever a destination is declared — publishers, dead
        letters — and at every publish, under ``app.test()`` too: the broker is the real one
        there, only its transport is in-process."""
        if not destination.name:
            raise ConfigurationError(f"{self.name}: a destination needs a name")

    async def publish(
        self,
        destination: str | Destination,
        message: Any,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """Encode ``message`` and publish it to ``destination`` (a ``str`` names a stream);
        returns the transport's receipt. The app's and this broker's publish middlewares wrap
        it."""
        return await self.publish_through(self.middlewares, destination, message, headers=headers)

    async def publish_through(
        self,
        middlewares: tuple[Middleware, ...],
        destination: str | Destination,
        message: Any,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> Any:
        """``publish``, inside the app's middlewares and ``middlewares`` (a publisher's router
        chain, outermost first; the broker's own come first in it)."""
        target = self.check_destination(destination)
        return await self._publish_checked(middlewares, target, message, headers)

    async def _publish_checked(
        self,
        middlewares: tuple[Middleware, ...],
        target: Destination,
        message: Any,
        headers: Mapping[str, str] | None,
    ) -> Any:
        hooks = publish_hooks(self.app_middlewares + middlewares)
        if not hooks:
            return await self._send(target, encode(message), headers or {})
        if self._system is None:  # described once: a description is not built per publish
            self._system = self.description().system
        call = PublishCall(
            self.name, target, message, dict(headers or {}),
            kind=broker_kind(self), system=self._system,
        )  # fmt: skip
        async with AsyncExitStack() as stack:
            for hook in hooks:
                await stack.enter_async_context(hook.publish(call))
            try:
                call.receipt = await self._send(target, encode(message), call.headers)
            except Exception as exc:
                call.error = exc
                raise
        return call.receipt

    # ---- request-reply -----------------------------------------------------------------------

    @overload
    async def request(
        self,
        message: Any,
        destination: str | Destination,
        *,
        timeout: float = ...,  # noqa: ASYNC109 - the request's contract
        headers: Mapping[str, str] | None = ...,
        reply_type: None = ...,
    ) -> Reply: ...

    @overload
    async def request(
        self,
        message: Any,
        destination: str | Destination,
        *,
        timeout: float = ...,  # noqa: ASYNC109 - the request's contract
        headers: Mapping[str, str] | None = ...,
        reply_type: type[T],
    ) -> T: ...

    @overload
    async def request(
        self,
        message: Any,
        destination: str | Destination,
        *,
        timeout: float = ...,  # noqa: ASYNC109 - the request's contract
        headers: Mapping[str, str] | None = ...,
        reply_type: Any,
    ) -> Any: ...

    async def request(
        self,
        message: Any,
        destination: str | Destination,
        *,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,  # noqa: ASYNC109 - as FastStream users expect
        headers: Mapping[str, str] | None = None,
        reply_type: Any = None,
    ) -> Any:
        """Publish ``message`` to ``destination`` as a request and return its reply: the value
        the handler that takes it returned, as a :class:`~trio_streams.core.replies.Reply`, or
        decoded to ``reply_type`` (as a handler's argument is decoded).

        Raises :class:`~trio_streams.core.replies.RemoteError` when the handler failed (it
        raised until its message was given up, or its message could not be decoded),
        :class:`~trio_streams.core.requests.RequestTimeout` (a ``trio.TooSlowError``) when no
        reply came within ``timeout`` seconds — at once, as
        :class:`~trio_streams.core.requests.NoResponders`, when the transport tells that nobody
        received the request — and :class:`~trio_streams.core.requests.ReplyLost` at once when
        the connection the reply would come on is lost meanwhile; while that connection is
        being made again, a request waits for it (within its timeout) before it is published.
        A reply that comes later is dropped and counted. Cancelled, the request stops waiting
        and leaves nothing behind (the request itself may have been published, and may be
        handled).

        The request carries ``x-trio-streams-correlation-id`` and ``x-trio-streams-reply-to``
        in its headers, with ``headers``; the request middlewares (``Middleware.request``) wrap
        it whole, and the publish middlewares its publish, as any publish."""
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ConfigurationError(f"timeout must be a number of seconds > 0, not {timeout!r}")
        given = dict(headers or {})
        for reserved in (CORRELATION_HEADER, REPLY_TO_HEADER):
            if reserved in given:
                raise ConfigurationError(
                    f"request headers may not set {reserved!r}: each request sets its own"
                )
        target = self.check_destination(destination)
        correlation_id = new_correlation_id()
        hooks = request_hooks(self.app_middlewares + self.middlewares)
        if hooks:
            call = RequestCall(
                self.name, target, message, given, correlation_id, timeout, self,
                kind=broker_kind(self), system=self.description().system,
            )  # fmt: skip
            reply = await run_request(hooks, call, self._request)
        else:
            reply = await self._request(target, message, timeout, given, correlation_id)
        return reply if reply_type is None else reply.decode(reply_type)

    async def _request(
        self,
        target: Destination,
        message: Any,
        timeout: float,  # noqa: ASYNC109 - the request's contract
        given: dict[str, str],
        correlation_id: str,
    ) -> Reply:
        """Publish the request and wait for its reply; raises what :meth:`request` says."""
        where = f"{target.kind.value} {target.name!r}"
        inbox: ReplyInbox | None = None
        waiting: PendingRequest | None = None
        with trio.move_on_after(timeout) as waited:
            inbox = await self._reply_inbox()
            given[CORRELATION_HEADER] = correlation_id
            given[REPLY_TO_HEADER] = inbox.address
            waiting = inbox.expect(correlation_id)
            try:
                receipt = None
                with trio.CancelScope() as waiting.publishing:  # failing the request ends it
                    try:
                        receipt = await self.publish(target, message, headers=given)
                    except Exception:
                        if waiting.reply is None:
                            raise
                        # Its reply came before the publish's error (a connection lost after
                        # the server took the request): it was taken, and this is its answer.
                waiting.publishing = None
                if self._reached_nobody(target, receipt):
                    why = "no subscriber received it (PUBLISH reached 0)"
                    raise NoResponders(where, timeout, correlation_id, why)
                if not waiting.event.is_set():
                    await waiting.event.wait()
            finally:
                inbox.forget(correlation_id)
        answered = waiting is not None and waiting.event.is_set()
        if waited.cancelled_caught and not answered:
            why = self._deaf_inbox() if inbox is None else ""  # it waited, unpublished
            why = why or await self._unserved(target)
            raise RequestTimeout(where, timeout, correlation_id, why)
        assert waiting is not None  # answered: the deadline passed after the reply came
        if waiting.error is not None:
            raise type(waiting.error)(str(waiting.error)) from waiting.error
        reply = waiting.reply
        assert reply is not None
        if ERROR_HEADER in reply.headers:
            raise RemoteError.from_reply(where, reply.payload)
        return reply

    @property
    def requests_in_flight(self) -> int:
        """Requests of this broker waiting for their reply now."""
        return 0 if self._inbox is None else self._inbox.in_flight

    @property
    def unread_replies(self) -> int:
        """Replies that have arrived for this broker's requests and its inbox has not read yet
        (where its transport can tell): ``app.test()`` waits for none to be left."""
        return 0 if self._inbox is None else self._inbox.unread()

    @property
    def late_replies(self) -> int:
        """Replies dropped since the broker connected: their request no longer waited."""
        return self._late_earlier + (0 if self._inbox is None else self._inbox.late)

    @property
    def reply_inbox(self) -> ReplyInbox | None:
        """The reply inbox of this broker's requests while one is open (None before the first
        request and once the broker closed; a new one replaces one that failed): its ``late``
        counts the replies it dropped, which metrics carry across inboxes."""
        return self._inbox

    def reply_address(self) -> str:
        """A fresh reply address for this broker's inbox (a channel name by default)."""
        return f"trio-streams:reply:{process_name()}:{new_correlation_id()[:8]}"

    def reply_source(self, address: str) -> Source:
        """The subscription the inbox reads ``address``'s replies with."""
        raise UnsupportedError(f"{self.name} cannot take replies: it has no request-reply")

    def reply_destination(self, address: str) -> Destination:
        """Where a reply to ``address`` is published (a channel by default)."""
        return Destination.channel(address)

    def reply_command(
        self, address: str, payload: bytes, headers: Mapping[str, str]
    ) -> tuple[str, tuple[str | bytes, ...]] | None:
        """The command that sends one reply (its name and arguments), for a pipeline window
        to queue with the read's acknowledgement; None (the default) where replies are not
        sent by a command a window takes: they are then sent at once, by :meth:`send_reply`."""
        del address, payload, headers
        return None

    async def send_reply(self, address: str, payload: bytes, headers: Mapping[str, str]) -> Any:
        """Publish one reply (the handler side of a request), inside this broker's publish
        middlewares."""
        return await self._publish_checked(
            self.middlewares, self.reply_destination(address), payload, headers
        )

    async def _reply_inbox(self) -> ReplyInbox:
        """This broker's reply inbox, opened (subscribed) at the first request; concurrent first
        requests wait for the one that opens it."""
        while True:
            inbox = self._inbox
            if inbox is not None and not inbox.closed:
                if inbox.listening:
                    return inbox
                await inbox.changed()  # reconnecting: a reply sent now would be lost
                continue
            opening = self._opening_inbox
            if opening is not None:
                await opening.wait()
                continue
            transport, nursery = self.transport, self._nursery
            assert nursery is not None
            opening = self._opening_inbox = trio.Event()
            if inbox is not None:  # one that failed: its late replies still count
                self._late_earlier += inbox.late
                self._inbox = None
            try:
                address = self.reply_address()
                label = f"{self.name}: replies"
                source = transport.open_subscription(self.reply_source(address), {}, label=label)
                inbox = ReplyInbox(address, label)
                await nursery.start(inbox.run, source, SubscriberOptions())
                self._inbox = inbox
                return inbox
            finally:
                self._opening_inbox = None
                opening.set()

    def _reached_nobody(self, target: Destination, receipt: Any) -> bool:
        """Whether the receipt of a request published to ``target`` tells that nobody received
        it (a channel's publish that reached 0 subscribers): the request then fails at once,
        with :class:`~trio_streams.core.requests.NoResponders`. A broker whose count is not
        the whole (a classic channel in a Redis cluster: the node's own) says False."""
        return target.is_channel and receipt == 0

    def _deaf_inbox(self) -> str:
        """Why a request timed out unpublished: the reply subscription did not subscribe again
        in time (its lasting faults), or empty."""
        inbox = self._inbox
        if inbox is None or inbox.closed or inbox.listening:
            return ""
        return f"not sent: the reply subscription was not listening ({inbox.deafness()})"

    async def _unserved(self, target: Destination) -> str:
        """Why nobody may serve ``target``, where the transport can tell (bounded: 1 s)."""
        transport = self._transport
        if transport is None:
            return ""
        with trio.move_on_after(1):
            try:
                return await transport.unserved(target)
            except Exception:  # noqa: BLE001 - only a hint for the timeout's message
                return ""
        return ""

    async def _send(self, target: Destination, payload: bytes, headers: Mapping[str, str]) -> Any:
        if target.kind is DestinationKind.STREAM:
            return await self.transport.publish(target.name, payload, headers)
        return await self.transport.publish_to(target, payload, headers)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
