"""Middlewares: code that wraps each delivery's handling and each publish.

A middleware is an object with up to four hooks; three are async context manager factories:

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
  An error of the publish is raised through the ``yield``. A handler's reply to a request is a
  publish too (:attr:`PublishCall.is_reply`).
- ``request(call)`` wraps one ``broker.request`` (:class:`RequestCall`), from before its
  publish (which the ``publish`` hooks wrap, inside it) to its outcome: ``headers`` may be
  changed before the ``yield``; ``outcome`` (``ok``, ``remote_error``, ``timeout``,
  ``no_responders``, ``lost``, ``error``, ``cancelled``), ``reply`` and ``error`` are set after
  it. The request's error (a :class:`~.replies.RemoteError`, a
  :class:`~.requests.RequestTimeout`...) and its cancellation are raised through the
  ``yield``. The reply's decoding to ``reply_type`` comes after, outside the hook.
- ``observe(handled)`` is told, synchronously, of each delivery's verdict (a
  :class:`~trio_streams.core.dispatch.HandledMessage`, with ``seconds`` its handling took): the
  cheap hook for counting, which keeps the common path in line (metrics use it).
- ``ack_counter(subscription)``, beside ``observe``: asked once per subscription as it starts,
  it returns a function told of each plain ack of that subscription (the handler was called
  and acknowledged, nothing dead-lettered) with the seconds its handling took (None where it is
  not timed). Those acks then reach it instead of ``observe``, with no record built for them:
  the cheapest hook, for counting the commonest verdict into counters bound to the
  subscription once (metrics use it). Every other verdict still goes to ``observe``.

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

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, final

if TYPE_CHECKING:
    from ._failure import Verdict
    from .broker import Broker
    from .context import Context
    from .delivery import Delivery
    from .destinations import Destination
    from .dispatch import HandledMessage
    from .outcome import Outcome
    from .replies import Reply
    from .transport import Source

__all__ = [
    "REQUEST_OUTCOMES",
    "HandlerCall",
    "Middleware",
    "PublishCall",
    "RequestCall",
    "ack_counters",
    "handle_hooks",
    "observe_hooks",
    "publish_hooks",
    "record_observers",
    "request_hooks",
    "request_outcome",
    "run_request",
]

#: What became of a request (:attr:`RequestCall.outcome`): a value replied, a failure replied
#: (:class:`~.replies.RemoteError`), no reply in time, nobody received it, its reply's
#: subscription lost meanwhile, another error (its publish failed), its caller cancelled it.
REQUEST_OUTCOMES: Final = (
    "ok", "remote_error", "timeout", "no_responders", "lost", "error", "cancelled",
)  # fmt: skip


class Middleware:
    """Base of middlewares; override the hooks it needs: ``handle``, ``publish``,
    ``request``, ``observe`` (see the module)."""

    def handle(self, call: HandlerCall) -> AbstractAsyncContextManager[None]:
        """Wrap the handling of one delivery; entered before decoding, left after settling."""
        raise NotImplementedError  # only overridden hooks are called

    def publish(self, call: PublishCall) -> AbstractAsyncContextManager[None]:
        """Wrap one publish; ``call.headers`` may be changed before the ``yield``."""
        raise NotImplementedError  # only overridden hooks are called

    def request(self, call: RequestCall) -> AbstractAsyncContextManager[None]:
        """Wrap one request, its publish and its wait for the reply; ``call.headers`` may be
        changed before the ``yield``, ``call.outcome`` is set after it. Optional: a middleware
        that does not override it is not entered (and an older middleware works unchanged)."""
        raise NotImplementedError  # only overridden hooks are called

    def observe(self, handled: HandledMessage) -> None:
        """Be told, synchronously, of each delivery's verdict as it is decided (before its
        settle), with how long its handling took: the cheap hook for counting. No context
        manager is entered and the common path stays in line, so it costs a function call;
        it must not block or raise."""
        raise NotImplementedError  # only overridden hooks are called

    def ack_counter(self, subscription: str) -> Callable[[float | None], None]:
        """The function that counts a plain ack of ``subscription`` (handler called, acked,
        not dead-lettered), given the seconds its handling took (None where it is not timed);
        asked once per subscription as it starts. Overridden beside ``observe``: such acks
        are then told to it instead, without a record. It must not block or raise."""
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

    @property
    def is_reply(self) -> bool:
        """True when this publish is a handler's reply to a request: it carries the request's
        ``x-trio-streams-correlation-id`` and no ``x-trio-streams-reply-to`` (a request carries
        both). Its destination is then the caller's reply address, made per caller: not a name
        to label a metric or a span name with."""
        from .replies import CORRELATION_HEADER, REPLY_TO_HEADER  # imported by the first publish

        headers = self.headers
        return CORRELATION_HEADER in headers and REPLY_TO_HEADER not in headers

    @property
    def is_error_reply(self) -> bool:
        """True when this publish is a reply that reports the handler's failure (it carries
        ``x-trio-streams-error``: the caller raises :class:`~.replies.RemoteError`)."""
        from .replies import ERROR_HEADER

        return self.is_reply and ERROR_HEADER in self.headers


@final
@dataclass(slots=True, eq=False)
class RequestCall:
    """One request (``broker.request``) as a ``request`` hook sees it, filled in as it goes."""

    #: The broker's name.
    broker: str
    destination: Destination
    #: What is requested, before encoding.
    message: Any
    #: The headers the request is published with, besides the two it gets for being a request
    #: (``x-trio-streams-correlation-id``, ``x-trio-streams-reply-to``): a middleware may add
    #: or change them before the ``yield``.
    headers: dict[str, str]
    #: The id the request and its reply share (``x-trio-streams-correlation-id``).
    correlation_id: str
    #: How long the request waits for its reply (seconds).
    timeout: float
    #: The broker making the request (its ``late_replies`` counts the replies that came after
    #: their request stopped waiting).
    requester: Broker
    #: The broker's kind (``Broker.kind``): ``redis``, ``file``, ``memory``.
    kind: str = "memory"
    #: The broker's ``messaging.system`` (see :class:`~.description.BrokerDescription`).
    system: str = "trio_streams.memory"
    #: What became of it, once known: one of ``REQUEST_OUTCOMES`` (``ok``, ``remote_error``,
    #: ``timeout``, ``no_responders``, ``lost``, ``error``, ``cancelled``).
    outcome: str | None = None
    #: The reply, when a value came back (``outcome == "ok"``).
    reply: Reply | None = None
    #: What the request raised (a :class:`~.replies.RemoteError`, a
    #: :class:`~.requests.RequestTimeout`...); None when it succeeded or was cancelled.
    error: BaseException | None = None


def request_outcome(error: BaseException) -> str:
    """The outcome (:data:`REQUEST_OUTCOMES`) a request that raised ``error`` came to."""
    import trio  # imported by then: a request runs under Trio

    from .replies import RemoteError
    from .requests import NoResponders, ReplyLost, RequestTimeout

    if isinstance(error, RemoteError):
        return "remote_error"
    if isinstance(error, NoResponders):  # a RequestTimeout, told at once
        return "no_responders"
    if isinstance(error, RequestTimeout):
        return "timeout"
    if isinstance(error, ReplyLost):
        return "lost"
    if isinstance(error, trio.Cancelled):
        return "cancelled"
    return "error"


async def run_request(
    hooks: Sequence[Middleware],
    call: RequestCall,
    send: Callable[[Destination, Any, float, dict[str, str], str], Awaitable[Reply]],
) -> Reply:
    """Run one request inside ``hooks``' ``request`` (outermost first): ``send`` publishes it
    and waits for its reply (``Broker._request``); ``call`` is filled in with its outcome
    before the hooks are left. Raises what ``send`` raised, through the hooks."""
    import trio

    async with AsyncExitStack() as stack:
        for hook in hooks:
            await stack.enter_async_context(hook.request(call))
        try:
            reply = await send(
                call.destination, call.message, call.timeout, call.headers, call.correlation_id
            )
        except BaseException as exc:
            call.outcome = request_outcome(exc)
            if not isinstance(exc, trio.Cancelled):
                call.error = exc
            raise
        call.reply = reply
        call.outcome = "ok"
    return reply


def _overrides(middleware: Middleware, hook: str) -> bool:
    return getattr(type(middleware), hook) is not getattr(Middleware, hook)


def handle_hooks(middlewares: Sequence[Middleware]) -> tuple[Middleware, ...]:
    """The middlewares, outermost first, that wrap handling."""
    return tuple(m for m in middlewares if _overrides(m, "handle"))


def publish_hooks(middlewares: Sequence[Middleware]) -> tuple[Middleware, ...]:
    """The middlewares, outermost first, that wrap publishing."""
    return tuple(m for m in middlewares if _overrides(m, "publish"))


def request_hooks(middlewares: Sequence[Middleware]) -> tuple[Middleware, ...]:
    """The middlewares, outermost first, that wrap requests."""
    return tuple(m for m in middlewares if _overrides(m, "request"))


def observe_hooks(
    middlewares: Sequence[Middleware],
) -> tuple[Callable[[HandledMessage], None], ...]:
    """The ``observe`` hooks of the middlewares that have one, outermost first."""
    return tuple(m.observe for m in middlewares if _overrides(m, "observe"))


def ack_counters(
    middlewares: Sequence[Middleware], subscription: str
) -> tuple[Callable[[float | None], None], ...]:
    """The ``ack_counter`` of each middleware that has one and an ``observe`` hook, outermost
    first, bound to ``subscription``: asked once, as it starts."""
    return tuple(
        m.ack_counter(subscription)
        for m in middlewares
        if _overrides(m, "observe") and _overrides(m, "ack_counter")
    )


def record_observers(
    observers: Sequence[Callable[[HandledMessage], None]], middlewares: Sequence[Middleware]
) -> tuple[Callable[[HandledMessage], None], ...]:
    """``observers`` but the ``observe`` hooks of the middlewares that count acks themselves
    (``ack_counter``): those a plain ack must still be told of, with a record."""
    counting = [
        m.observe for m in middlewares if _overrides(m, "observe") and _overrides(m, "ack_counter")
    ]
    return tuple(o for o in observers if o not in counting)


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
                "override its hooks: handle, publish, request, observe, ack_counter)"
            )
    return tuple(value)


def broker_kind(broker: object) -> str:
    """The kind ``broker`` says it is (``Broker.kind``: ``redis``, ``file``, ``memory``), or
    its class name if it says none. Read per delivery: a class attribute, not a description."""
    return getattr(broker, "kind", "") or type(broker).__name__
