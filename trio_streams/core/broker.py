"""``Broker``: where subscriptions are mounted, and the handle a running app publishes through.

A broker is declared at import time (``FileBroker("orders.ss")``, ``RedisBroker(url)``) and
registered on an app (``app.broker(...)``). While the app runs, the broker holds a connected
``Transport``; under ``app.test()`` it holds an in-process one instead, so the same handlers,
publishers and ``broker.publish`` calls run without any server.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from typing import Any, ClassVar

from .codec import encode
from .description import BrokerDescription
from .destinations import Destination, DestinationKind
from .errors import ConfigurationError, TrioStreamsError, UnsupportedError
from .middleware import Middleware, PublishCall, broker_kind, publish_hooks
from .pipeline import CommandCheck
from .routing import Declared, Router, Subscription
from .transport import Source, Transport

__all__ = ["Broker", "NotConnected"]


class NotConnected(TrioStreamsError):
    """A broker was used to publish while its app was not running."""


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
            raise NotConnected(f"{self.name} is not connected: is its app running?")
        return self._transport

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

    async def _send(self, target: Destination, payload: bytes, headers: Mapping[str, str]) -> Any:
        if target.kind is DestinationKind.STREAM:
            return await self.transport.publish(target.name, payload, headers)
        return await self.transport.publish_to(target, payload, headers)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"
