"""The contract between the core and a transport.

A transport plugs in at three points:

- a ``Source`` names what a subscription reads (``MemoryStream("orders")``,
  ``FileStream("orders").replay()``, ``RedisStream("orders")``). It is a plain immutable value,
  declared at import time, that knows its in-process equivalent so ``app.test()`` can run the
  same app on in-process transports;
- a ``Transport`` is a connected broker: it publishes and opens subscriptions;
- a ``SubscriptionSource`` is one mounted subscription's reader. Exactly one task, the
  subscription's driver, calls ``read`` and ``seek``; the dispatcher's workers call ``settle``.

Settling is per delivery in this contract. Transports that settle per read (a stream's XACK for a
whole read, the Redis pipeline window) collect settles and flush when the read is complete; the
core never needs to know.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import trio

from .delivery import Delivery
from .errors import ConfigurationError, TrioStreamsError, UnsupportedError
from .host import SubscriptionHost
from .outcome import Outcome
from .positions import Position

if TYPE_CHECKING:
    from .memory.sources import MemoryStream

__all__ = [
    "SeekRefused",
    "Source",
    "SourceFault",
    "SubscriptionSource",
    "Transport",
    "Unsettled",
]


class SeekRefused(TrioStreamsError):
    """A seek could not be carried out; the message says why and which subscription."""


class Unsettled(enum.Enum):
    """Why a delivery ended without a settle (see :meth:`SubscriptionSource.unsettled`)."""

    #: A seek moved the reader before its handler started: dropped unhandled.
    STALE = "stale"
    #: Still queued when a seek moved the reader (or a live subscription ended): purged.
    PURGED = "purged"
    #: Shutdown (or a failure) cancelled it before it was settled, wherever it was: read and not
    #: yet queued, queued, waiting for a lane, in a handler, or waiting out a delay.
    ABANDONED = "abandoned"


class SourceFault(TrioStreamsError):
    """A fault the source recovers from, raised from ``read``, ``settle`` or ``aclose``.

    The core does not fail the app: it reports the fault (logged when it begins, counted, health
    ``degraded``; see :mod:`trio_streams.host`) and carries on — it calls ``read`` again after a
    pause that starts at 1 ms and doubles to 1 s while reads keep failing; a failed ``settle``
    leaves the delivery to the transport (an entry whose settle failed stays pending and is
    delivered again). The fault clears when the same operation next succeeds.
    """

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message


def check_source_args(kind: str, names: tuple[str, ...], start_at: object) -> None:
    """Refuse, with ``ConfigurationError``, the arguments no source can take."""
    if not names:
        raise ConfigurationError(f"{kind} needs at least one stream name")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"stream names are non-empty strings, not {name!r}")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"stream names repeat: {names!r}")
    if start_at is not None and not isinstance(start_at, Position):
        raise ConfigurationError(f"start_at takes a Position, not {start_at!r}")


class Source(ABC):
    """What a subscription reads: an immutable description, validated by its broker at mount."""

    @property
    @abstractmethod
    def name(self) -> str:
        """A short label for logs and test assertions (usually the stream name)."""

    @property
    @abstractmethod
    def streams(self) -> tuple[str, ...]:
        """The names of the streams (keys, channels, lists) this source reads."""

    @abstractmethod
    def with_prefix(self, prefix: str) -> Self:
        """This source with every stream name prefixed (``Router(prefix=...)``)."""

    @abstractmethod
    def in_process(self) -> MemoryStream:
        """The in-process source with the same semantics, for ``app.test()``."""

    @property
    def seekable(self) -> bool:
        """Whether handlers may seek subscriptions to this source (checked at mount)."""
        return False


class SubscriptionSource(ABC):
    """One mounted subscription's connection to its transport.

    ``read`` returns the deliveries of one read (at least one), or None once the source has
    ended (a replay reached its end, a stream's end-of-stream marker). It may block until there
    is something to read, and must be safe to cancel while blocked: a cancelled read loses
    nothing. After returning None it may be called again (a retry or a seek may have given the
    source more to read); it returns None again if not.
    """

    #: True if ``seek`` works; handlers of other sources get a clear error from ``ctx.seeker``.
    seekable: bool = False
    #: True if this source keeps ``retry_after`` delays itself (durably); otherwise the core
    #: holds the delay in a Trio timer and then settles with ``retry()``.
    durable_delay: bool = False
    #: True for a live (tail-following) subscription: a refused seek ends it.
    live: bool = True

    async def open(self, host: SubscriptionHost) -> None:
        """Prepare, before the app reports started (create a consumer group, take back this
        consumer's own pending entries, check keys), and start the source's own tasks with
        ``host.start_soon``. An exception here fails ``serve``'s start, not a running app.

        Cancelled, it leaves nothing half-done that ``aclose`` does not undo: ``aclose`` is
        called whether or not ``open`` completed.
        """
        await trio.lowlevel.checkpoint()

    @abstractmethod
    async def read(self) -> Sequence[Delivery] | None: ...

    def poll(self) -> Sequence[Delivery]:
        """Deliveries available right now, without waiting (empty if none or if unknown).

        The driver tries this before ``read``, so a busy subscription reads without paying for
        a cancellable wait each time, and once more before it ends a subscription whose
        ``read`` returned None: a source that can be given more after its end (a retry copy
        appended to a replayed file) must return it here.
        """
        return ()

    async def seek(self, position: Position) -> None:
        """Move the reader. Runs to completion (the driver shields it); raise SeekRefused."""
        raise UnsupportedError(f"{type(self).__name__} cannot seek")

    @abstractmethod
    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        """Carry out ``outcome`` for ``delivery`` (see the settle table in the docs).

        ``retry`` and ``retry_after`` copies carry ``retry_headers(delivery)``. The core calls
        this at most once per delivery; a delivery abandoned without an outcome is never settled.
        """

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        """``delivery`` ended without a settle, and never will be settled (see :class:`Unsettled`).

        Called synchronously, once per such delivery, at the moment the core lets go of it, so
        a source can tell when no unsettled delivery remains (a pipeline window's flush rule) or
        stop renewing a lease. A durable transport leaves the entry pending, to deliver again.
        Must not block or raise. Every delivery ``read`` returns gets exactly one of ``settle``
        (through a retry copy, a dead letter or an ack) or ``unsettled``.
        """
        del delivery, why  # nothing to do for a source that keeps no per-delivery state

    def pending(self) -> int:
        """Messages available without waiting, where the source can tell (0 if unknown)."""
        return 0

    async def aclose(self) -> None:
        """Release the source after its dispatcher has finished (flush what is collected)."""
        await trio.lowlevel.checkpoint()


class Transport(ABC):
    """A connected broker: it publishes, and opens a reader for each mounted subscription."""

    @abstractmethod
    async def publish(self, destination: str, payload: bytes, headers: Mapping[str, str]) -> Any:
        """Publish one message; returns the transport's receipt (e.g. its position), or None."""

    @abstractmethod
    def open_subscription(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> SubscriptionSource:
        """The reader for one subscription. ``label`` names it in errors and logs."""
