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

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Self

import trio

from .delivery import Delivery
from .errors import ConfigurationError, TrioStreamsError, UnsupportedError
from .outcome import Outcome
from .positions import Position

if TYPE_CHECKING:
    from .memory.sources import MemoryStream

__all__ = ["SeekRefused", "Source", "SubscriptionSource", "Transport"]


class SeekRefused(TrioStreamsError):
    """A seek could not be carried out; the message says why and which subscription."""


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
