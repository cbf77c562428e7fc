"""Declaring subscriptions and publishers: ``Router``, and the options every subscriber takes.

Routers collect handlers at import time; a broker mounts them (``broker.include_router``),
which is when the broker checks that its transport can do what each subscription asks. A
handler's signature is checked as soon as it is decorated, so a mistake fails at import, not
when the first message arrives.

A subscriber names what it reads with a source (``RedisStream("orders")``, ``FileStream(...)``)
or with a plain stream name (``"orders"``): the name travels through the routers as a ``str``,
prefixed by each, and the broker it reaches makes it its transport's default source
(:meth:`~trio_streams.core.broker.Broker.source_for`), before anything else checks it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, TypeVar, final

from ._failure import FailurePolicy, RetryDelay
from .destinations import Destination
from .errors import ConfigurationError
from .handler import Handler, analyse
from .middleware import Middleware, check_middlewares
from .transport import Source

if TYPE_CHECKING:
    from .broker import Broker

__all__ = [
    "BY_STREAM",
    "ByStream",
    "Declared",
    "KeyFunction",
    "Publisher",
    "Router",
    "SubscriberOptions",
    "Subscription",
]

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])
KeyFunction = Callable[[Any], Hashable]


@final
class ByStream:
    """``by_key=BY_STREAM``: lanes keyed by each message's stream (its stream key, list or
    channel), read from the delivery without decoding it. What an ordered consumer group of a
    stream file mounts itself with (``FileStream(...).group(..., ordered=True)``)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "BY_STREAM"


#: Lanes keyed by stream: see :class:`ByStream`.
BY_STREAM = ByStream()

_PUBLISHERS_ATTR = "__trio_streams_publishers__"
_BATCH_ATTR = "__trio_streams_batch__"


def _batch_publisher_error(name: str) -> ConfigurationError:
    return ConfigurationError(
        f"handler {name}: a batch handler returns outcomes, so it cannot have publishers"
    )


@final
@dataclass(frozen=True, slots=True)
class SubscriberOptions:
    """How the core runs one subscription (transport options travel separately)."""

    #: Handler tasks reading one bounded channel; 1 keeps messages in order.
    workers: int = 1
    #: With workers > 1: n ordered lanes; each key always goes to the same lane. A header name,
    #: or a function of the decoded message.
    by_key: str | KeyFunction | ByStream | None = None
    #: Deliver lists of up to ``batch`` messages, waiting at most ``max_wait`` s to fill one.
    batch: int | None = None
    max_wait: float = 0.1
    policy: FailurePolicy = field(default_factory=FailurePolicy)
    #: Capacity of the delivery channel; the driver stops reading while it is full.
    buffer: int | None = None
    #: Bound on retries waiting out a ``retry_after`` delay in this process.
    max_delayed: int = 10_000
    #: Answer no request (an observer of a stream a service answers): see :mod:`._answers`.
    no_reply: bool = False

    def __post_init__(self) -> None:
        for name in ("workers", "max_delayed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"{name} must be an int >= 1, got {value!r}")
        if self.batch is not None and (
            isinstance(self.batch, bool) or not isinstance(self.batch, int) or self.batch < 1
        ):
            raise ConfigurationError(f"batch must be an int >= 1, got {self.batch!r}")
        if not isinstance(self.no_reply, bool):
            raise ConfigurationError(f"no_reply is True or False, not {self.no_reply!r}")
        if self.buffer is not None and (not isinstance(self.buffer, int) or self.buffer < 1):
            raise ConfigurationError(f"buffer must be an int >= 1, got {self.buffer!r}")
        if self.max_wait <= 0:
            raise ConfigurationError(f"max_wait must be > 0 seconds, got {self.max_wait!r}")
        if self.by_key is not None and self.batch is not None:
            raise ConfigurationError("by_key and batch cannot be combined: lanes take one message")

    @property
    def channel_capacity(self) -> int:
        """The delivery channel's capacity, before the transport's read count is known."""
        return self.capacity_for(0)

    def capacity_for(self, read_count: int) -> int:
        """``buffer`` if set; else enough for every worker twice over, at least 16, and at least
        one read of the transport (``read_count``)."""
        if self.buffer is not None:
            return self.buffer
        return max(2 * self.workers * (self.batch or 1), 16, read_count)


@final
@dataclass(slots=True)
class Subscription:
    """A handler mounted on a broker, with everything needed to run it."""

    broker: Broker
    source: Source
    handler: Handler
    options: SubscriberOptions
    transport_options: Mapping[str, Any]
    name: str
    #: Middlewares wrapping its handling, outermost first: its broker's, its routers', its own
    #: (the app's go around them at run time).
    middlewares: tuple[Middleware, ...] = ()

    @property
    def publishers(self) -> list[Publisher]:
        return list(getattr(self.handler.fn, _PUBLISHERS_ATTR, ()))

    def __repr__(self) -> str:
        return f"<Subscription {self.name!r} on {self.source!r}>"


@final
@dataclass(slots=True)
class Declared:
    """A subscriber as declared (``@router.subscriber(...)``), on its way to its broker: each
    router it passes through prefixes its source and wraps it in its middlewares; the broker
    prepares it (:meth:`~trio_streams.core.broker.Broker.prepare`) and mounts it."""

    #: A plain stream name (a ``str``) until it reaches a broker, which makes it a source.
    source: Source | str
    fn: Callable[..., Awaitable[Any]]
    handler: Handler
    options: SubscriberOptions
    transport_options: dict[str, Any]
    name: str
    #: The middlewares of the routers it passed through on its way to the broker, and its own.
    middlewares: tuple[Middleware, ...] = ()


class Publisher:
    """A destination on a broker; decorate a handler with it to publish what the handler returns.

    Also usable alone: ``out = broker.publisher("orders"); await out.publish(order)``.
    """

    def __init__(
        self,
        owner: Router,
        destination: str | Destination,
        *,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self._owner = owner
        target = Destination.of(destination)
        #: The destination's name (before the router's prefix) and its kind.
        self.destination = target.name
        self.kind = target.kind
        broker = owner.broker_or_none()
        if broker is not None:
            # Refused at declaration, not at the first publish; with the prefixes it will have.
            broker.check_destination(target.with_prefix(owner.full_prefix()))
        self.headers: Mapping[str, str] = dict(headers or {})

    @property
    def broker(self) -> Broker:
        broker = self._owner.broker_or_none()
        if broker is None:
            raise ConfigurationError(
                f"publisher {self.destination!r} belongs to a router not yet included in a broker"
            )
        return broker

    @property
    def full_destination(self) -> str:
        return self._owner.full_prefix() + self.destination

    @property
    def target(self) -> Destination:
        """The destination, prefixed, with its kind."""
        return Destination(self.full_destination, self.kind)

    def __call__(self, fn: F) -> F:
        if getattr(fn, _BATCH_ATTR, False):
            raise _batch_publisher_error(getattr(fn, "__qualname__", repr(fn)))
        existing = getattr(fn, _PUBLISHERS_ATTR, None)
        if existing is None:
            existing = []
            setattr(fn, _PUBLISHERS_ATTR, existing)
        existing.append(self)
        return fn

    async def publish(self, message: Any, *, headers: Mapping[str, str] | None = None) -> Any:
        merged = {**self.headers, **headers} if headers else self.headers
        broker = self.broker
        return await broker.publish_through(
            self._owner.middleware_chain(), self.target, message, headers=merged
        )

    def __repr__(self) -> str:
        return f"<Publisher {self.full_destination!r}>"


class Router:
    """A group of subscribers and publishers, mounted on a broker with ``include_router``.

    ``prefix`` is put in front of every stream name; keyword defaults (``max_attempts=5``,
    ``workers=4``…) apply to every subscriber declared on this router.
    """

    def __init__(
        self, *, prefix: str = "", middlewares: Sequence[Middleware] | None = None, **defaults: Any
    ) -> None:
        self.prefix = prefix
        #: Wrap the handling of every subscriber mounted here, and every publish of its
        #: publishers (inside the app's and the enclosing routers' middlewares).
        self.middlewares = check_middlewares(middlewares, where=type(self).__name__)
        self._defaults = defaults
        self._declared: list[Declared] = []
        #: Publishers declared here, checked by the broker when this router is mounted.
        self._publishers: list[Publisher] = []
        self._routers: list[Router] = []
        self._parent: Router | None = None

    # ---- declaring ---------------------------------------------------------------------------

    def subscriber(
        self,
        source: Source | str,
        *,
        workers: int | None = None,
        by_key: str | KeyFunction | ByStream | None = None,
        batch: int | None = None,
        max_wait: float | None = None,
        max_attempts: int | None = None,
        dead_letter: str | None = None,
        retry_delay: RetryDelay | None = None,
        buffer: int | None = None,
        max_delayed: int | None = None,
        no_reply: bool | None = None,
        name: str | None = None,
        middlewares: Sequence[Middleware] | None = None,
        **transport_options: Any,
    ) -> Callable[[F], F]:
        """Mount the decorated ``async def`` handler on ``source``: a source
        (``RedisStream(...)``, ``FileStream(...)``, ``MemoryStream(...)``...), or a plain stream
        name, which the broker makes its default subscription of that name
        (:meth:`~trio_streams.core.broker.Broker.source_for`) when the declaration reaches it.

        Core options: ``workers``, ``by_key`` (ordered lanes), ``batch``/``max_wait``,
        ``max_attempts`` (deliveries including the first), ``dead_letter`` (destination for
        spent and undecodable deliveries, and those ``by_key`` raised on; one this very
        subscription reads is refused at mount, as it would loop forever), ``retry_delay``
        (seconds, or a function of the attempt, before a failed delivery is retried),
        ``buffer`` (delivery channel capacity; by default twice the workers, at least 16 and
        at least one read of the transport), ``no_reply=True`` (answer no request: an observer
        beside the service that answers a stream, whose own reply would race that service's),
        ``middlewares`` (:class:`~trio_streams.core.middleware.Middleware` wrapping this
        subscriber's handling, inside the app's, broker's and routers').
        Other keywords are the transport's; it refuses what it cannot do, right here.
        """
        _check_subscribed(source)
        given = {
            "workers": workers,
            "by_key": by_key,
            "batch": batch,
            "max_wait": max_wait,
            "max_attempts": max_attempts,
            "dead_letter": dead_letter,
            "retry_delay": retry_delay,
            "buffer": buffer,
            "max_delayed": max_delayed,
            "no_reply": no_reply,
        }
        own_middlewares = check_middlewares(middlewares, where="subscriber()")
        settings = {**self._defaults, **{k: v for k, v in given.items() if v is not None}}
        options = _options_from(settings)
        extra = {k: v for k, v in settings.items() if k not in _CORE_OPTIONS}
        extra.update(transport_options)

        def decorate(fn: F) -> F:
            handler = analyse(fn, batch=options.batch is not None)
            if options.batch is not None:
                if getattr(fn, _PUBLISHERS_ATTR, None):
                    raise _batch_publisher_error(handler.name)
                setattr(fn, _BATCH_ATTR, True)
            declared = Declared(
                source, fn, handler, options, extra, name or handler.name, own_middlewares
            )
            self._declared.append(declared)
            self._on_declared(declared)
            return fn

        return decorate

    def publisher(
        self, destination: str | Destination, *, headers: Mapping[str, str] | None = None
    ) -> Publisher:
        """A publisher to ``destination`` (a ``str`` names a stream); decorate a handler to
        publish its return value. The broker checks the destination here, or when this router
        is included in one."""
        publisher = Publisher(self, destination, headers=headers)
        self._publishers.append(publisher)
        return publisher

    def include_router(self, router: Router) -> None:
        """Mount every subscriber of ``router`` (and of the routers it includes) here."""
        if router is self or router._parent is not None:
            raise ConfigurationError("a router can be included once, and not in itself")
        router._parent = self
        self._routers.append(router)
        for declared in router.all_declared():
            self._on_declared(declared)
        broker = self.broker_or_none()
        if broker is not None:
            for publisher in router.all_publishers():
                broker.check_destination(publisher.target)

    # ---- walking the tree --------------------------------------------------------------------

    def all_declared(self) -> list[Declared]:
        """Every declaration here and in included routers, with prefixes applied."""
        found = [self._passed(d) for d in self._declared]
        for router in self._routers:
            found.extend(self._passed(d) for d in router.all_declared())
        return found

    def _passed(self, declared: Declared) -> Declared:
        """``declared`` as it leaves this router: prefixed, inside its middlewares."""
        source = declared.source
        prefixed = (
            self.prefix + source if isinstance(source, str) else source.with_prefix(self.prefix)
        )
        return replace(
            declared, source=prefixed, middlewares=self.middlewares + declared.middlewares
        )

    def all_publishers(self) -> list[Publisher]:
        """Every publisher declared here and in included routers."""
        found = list(self._publishers)
        for router in self._routers:
            found.extend(router.all_publishers())
        return found

    def full_prefix(self) -> str:
        parent = self._parent.full_prefix() if self._parent is not None else ""
        return parent + self.prefix

    def broker_or_none(self) -> Broker | None:
        return self._parent.broker_or_none() if self._parent is not None else None

    def _on_declared(self, declared: Declared) -> None:
        if self._parent is not None:
            self._parent._on_declared(self._passed(declared))

    def middleware_chain(self) -> tuple[Middleware, ...]:
        """This router's middlewares inside its parents', outermost first."""
        parent = self._parent.middleware_chain() if self._parent is not None else ()
        return parent + self.middlewares


_CORE_OPTIONS = frozenset(
    {
        "workers",
        "by_key",
        "batch",
        "max_wait",
        "max_attempts",
        "dead_letter",
        "retry_delay",
        "buffer",
        "max_delayed",
        "no_reply",
    }
)


def _check_subscribed(source: object) -> None:
    """Refuse, with ``ConfigurationError`` naming what was given and what is accepted, what
    ``subscriber()`` cannot read: anything but a source or a non-empty stream name."""
    if isinstance(source, Source):
        return
    if isinstance(source, str):
        if source:
            return
        what = "an empty name, which names no stream"
    else:
        what = f"{source!r} ({type(source).__name__})"
    raise ConfigurationError(
        f"subscriber() takes a stream name (a non-empty str, read as its broker's default "
        f"subscription) or a source (RedisStream(...), FileStream(...), MemoryStream(...), ...), "
        f"not {what}"
    )


def _options_from(settings: Mapping[str, Any]) -> SubscriberOptions:
    policy_args = {
        k: settings[k] for k in ("max_attempts", "dead_letter", "retry_delay") if k in settings
    }
    try:
        policy = FailurePolicy(**policy_args)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(str(exc)) from exc
    core = {
        k: settings[k]
        for k in ("workers", "by_key", "batch", "max_wait", "buffer", "max_delayed", "no_reply")
        if k in settings
    }
    return SubscriberOptions(policy=policy, **core)
