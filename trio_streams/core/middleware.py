"""Middlewares: code that wraps each delivery's handling and each publish.

A middleware is an object with up to three hooks; the first two are async context manager
factories:

- ``handle(call)`` wraps one delivery, from before its payload is decoded to after it is
  settled (acknowledged, retried, dead-lettered). ``call`` (:class:`HandlerCall`) is filled in
  as it goes: ``message`` once decoded, ``outcome``/``verdict``/``error`` once decided,
  ``settled`` once settled. A handler's exception is not raised through the middleware — the
  failure policy has already turned it into an outcome, and ``call.error`` holds it — but
  cancellation is: ``trio.Cancelled`` passes through the ``yield`` like through any ``async
  with``, so ``finally`` runs and ``except`` can see it. An exception a middleware raises
  fails the subscription, as a bug in the framework would.
- ``publish(call)`` wraps one publish (:class:`PublishCall`): ``headers`` may be changed before
  the ``yield`` (a trace context, a correlation id); ``receipt`` or ``error`` is set after it.
  An error of the publish is raised through the ``yield``.
- ``observe(handled)`` is told, synchronously, of each delivery's verdict (a
  :class:`~trio_streams.core.dispatch.HandledMessage`, with ``seconds`` its handling took): the
  cheap hook for counting, which keeps the common path in line (metrics use it).

Middlewares are given per app (``App(middlewares=...)``), per broker or router
(``RedisBroker(..., middlewares=...)``, ``Router(middlewares=...)``) and per subscriber
(``@broker.subscriber(..., middlewares=...)``); the app's are outermost, then the broker's and
its routers', outer to inner, then the subscriber's. A hook a middleware does not define costs
nothing: only the hooks a class overrides are entered.

Write one with :func:`contextlib.asynccontextmanager`::

    class Timing(Middleware):
        @asynccontextmanager
        async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
            started = time.perf_counter()
            try:
                yield
            finally:
                log.info("%s: %s in %.3f s", call.subscription, call.outcome,
                         time.perf_counter() - started)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, final

if TYPE_CHECKING:
    from ._failure import Verdict
    from .context import Context
    from .delivery import Delivery
    from .destinations import Destination
    from .dispatch import HandledMessage
    from .outcome import Outcome
    from .transport import Source

__all__ = [
    "HandlerCall",
    "Middleware",
    "PublishCall",
    "handle_hooks",
    "observe_hooks",
    "publish_hooks",
]


class Middleware:
    """Base of middlewares; override ``handle``, ``publish`` or both (see the module)."""

    def handle(self, call: HandlerCall) -> AbstractAsyncContextManager[None]:
        """Wrap the handling of one delivery; entered before decoding, left after settling."""
        raise NotImplementedError  # only overridden hooks are called

    def publish(self, call: PublishCall) -> AbstractAsyncContextManager[None]:
        """Wrap one publish; ``call.headers`` may be changed before the ``yield``."""
        raise NotImplementedError  # only overridden hooks are called

    def observe(self, handled: HandledMessage) -> None:
        """Be told, synchronously, of each delivery's verdict as it is decided (before its
        settle), with how long its handling took: the cheap hook for counting. No context
        manager is entered and the common path stays in line, so it costs a function call;
        it must not block or raise."""
        raise NotImplementedError  # only overridden hooks are called


@final
@dataclass(slots=True, eq=False)
class HandlerCall:
    """One delivery as a ``handle`` hook sees it, filled in as its handling goes on."""

    #: The subscription's name.
    subscription: str
    #: What it reads.
    source: Source
    #: The broker it runs on (its name).
    broker: str
    delivery: Delivery
    #: The broker's kind (``Broker.kind``): ``redis``, ``file``, ``memory``; its class name if it
    #: names none.
    kind: str = "memory"
    #: The handler's context (None for a handler that takes none and a batch).
    context: Context | None = None
    #: The decoded payload once decoded (None before, or when it could not be decoded).
    message: Any = None
    #: What the handler (or the failure or decode policy) decided; None until then.
    outcome: Outcome | None = None
    #: What was settled after the attempts cap, and where it was dead-lettered.
    verdict: Verdict | None = None
    #: The handler's exception, a decode or encode error; None if there was none.
    error: BaseException | None = None
    #: False when the handler was not called (undecodable, or already tried max_attempts).
    called: bool = False
    #: True once the transport settled it (an ack, a retry copy, a dead letter).
    settled: bool = False
    #: Called, in order, once ``outcome`` and ``verdict`` are decided and before the transport
    #: settles the delivery: a hook appends to it to note the decision at the one moment a
    #: crash cannot yet have lost it to the settle (a history checker's ``run_ended``).
    on_decided: list[Callable[[HandlerCall], None]] = field(default_factory=list)

    @property
    def attempt(self) -> int:
        return self.delivery.attempt


@final
@dataclass(slots=True, eq=False)
class PublishCall:
    """One publish as a ``publish`` hook sees it."""

    #: The broker's name.
    broker: str
    destination: Destination
    #: What is published, before encoding (for a handler's return value, the bytes it was
    #: encoded to, once for all of its publishers).
    message: Any
    #: The headers to send: a middleware may add or change them before the ``yield``.
    headers: dict[str, str] = field(default_factory=dict)
    #: The transport's receipt (a position, a length, a subscriber count), once published.
    receipt: Any = None
    error: BaseException | None = None
    #: The broker's kind (``Broker.kind``): ``redis``, ``file``, ``memory``; its class name if it
    #: names none.
    kind: str = "memory"
    #: The broker's ``messaging.system`` (see :class:`~.description.BrokerDescription`).
    system: str = "trio_streams.memory"


def _overrides(middleware: Middleware, hook: str) -> bool:
    return getattr(type(middleware), hook) is not getattr(Middleware, hook)


def handle_hooks(middlewares: Sequence[Middleware]) -> tuple[Middleware, ...]:
    """The middlewares, outermost first, that wrap handling."""
    return tuple(m for m in middlewares if _overrides(m, "handle"))


def publish_hooks(middlewares: Sequence[Middleware]) -> tuple[Middleware, ...]:
    """The middlewares, outermost first, that wrap publishing."""
    return tuple(m for m in middlewares if _overrides(m, "publish"))


def observe_hooks(
    middlewares: Sequence[Middleware],
) -> tuple[Callable[[HandledMessage], None], ...]:
    """The ``observe`` hooks of the middlewares that have one, outermost first."""
    return tuple(m.observe for m in middlewares if _overrides(m, "observe"))


def check_middlewares(value: object, *, where: str) -> tuple[Middleware, ...]:
    """``middlewares=`` checked: a sequence of :class:`Middleware`."""
    from .errors import ConfigurationError

    if value is None:
        return ()
    if isinstance(value, Middleware) or not isinstance(value, Sequence):
        raise ConfigurationError(f"{where}: middlewares= takes a list of Middleware, not {value!r}")
    for item in value:
        if not isinstance(item, Middleware):
            raise ConfigurationError(
                f"{where}: {item!r} is not a Middleware (subclass trio_streams.Middleware and "
                "override handle and/or publish)"
            )
    return tuple(value)


def broker_kind(broker: object) -> str:
    """The kind ``broker`` says it is (``Broker.kind``: ``redis``, ``file``, ``memory``), or
    its class name if it says none. Read per delivery: a class attribute, not a description."""
    return getattr(broker, "kind", "") or type(broker).__name__
