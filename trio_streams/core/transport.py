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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self, final

import trio

from .delivery import RETRY_COUNT_HEADER, RETRY_TARGET_HEADER, Delivery
from .description import SourceDescription
from .destinations import Destination
from .errors import ConfigurationError, TrioStreamsError, UnsupportedError
from .host import SubscriptionHost
from .outcome import Outcome
from .pipeline import Pipeline
from .positions import Position, PositionKind
from .replies import REPLY_TO_HEADER

__all__ = [
    "DEAD_LETTER_HEADERS",
    "DeadLetter",
    "SeekRefused",
    "Sharing",
    "Source",
    "SourceFault",
    "SubscriptionSource",
    "Transport",
    "Unsettled",
    "check_source_args",
    "read_count_option",
    "settles_with",
]


class SeekRefused(TrioStreamsError):
    """A seek could not be carried out; the message says why and which subscription."""


#: Headers a dead letter carries besides the ones it arrived with (see :class:`DeadLetter`).
DEAD_LETTER_HEADERS = (
    "x-dead-letter-reason",
    "x-dead-letter-error",
    "x-dead-letter-attempts",
    "x-dead-letter-stream",
    "x-dead-letter-position",
    "x-dead-letter-subscription",
    "x-dead-letter-at-ms",
)
#: A dead letter's error text is cut to this many characters.
_ERROR_TEXT_LIMIT = 1000


@final
@dataclass(frozen=True, slots=True)
class DeadLetter:
    """Where a spent delivery goes, and why: the copy carries the headers it arrived with and
    ``x-dead-letter-*`` headers saying why (see :meth:`headers_for`)."""

    destination: str
    #: ``max-attempts`` (tried as often as allowed), ``undecodable`` (the payload cannot be
    #: decoded, which no retry fixes), ``by-key`` (the subscription's ``by_key`` function raised
    #: on the message, so it has no lane; the handler did not run) or ``unencodable`` (the
    #: handler ran, but the value it returned cannot be encoded for its publishers; it is not
    #: run again).
    reason: str
    #: The exception type and message of the last failure ("" when an outcome asked for it).
    error: str
    attempts: int
    subscription: str
    #: Wall-clock milliseconds since the Unix epoch when it was dead-lettered.
    at_ms: int

    def headers_for(self, delivery: Delivery) -> dict[str, str]:
        """The dead letter's headers: the delivery's own, then why."""
        headers = dict(delivery.headers)
        # A dead letter starts afresh on its own stream: every reader there sees it (no retry
        # target) and handles it (its attempts are in x-dead-letter-attempts, not a retry
        # count that the reader's attempts cap would count as already spent).
        headers.pop(RETRY_TARGET_HEADER, None)
        headers.pop(RETRY_COUNT_HEADER, None)
        # The request it was (if it was one) has had its failure for an answer: a dead letter's
        # reader does not answer it again.
        headers.pop(REPLY_TO_HEADER, None)
        position = delivery.position
        where = "" if position is None else position.describe()
        values = (
            self.reason,
            self.error,
            str(self.attempts),
            delivery.stream,
            where,
            self.subscription,
            str(self.at_ms),
        )
        headers.update(zip(DEAD_LETTER_HEADERS, values, strict=True))
        return headers

    @staticmethod
    def describe(error: BaseException | None) -> str:
        """``Type: message`` of ``error`` on one line, cut to a sane length ("" for None)."""
        if error is None:
            return ""
        text = f"{type(error).__name__}: {error}".replace("\r", " ").replace("\n", " ").strip()
        return text[:_ERROR_TEXT_LIMIT]


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
    ``degraded``; see :mod:`trio_streams.core.host`) and carries on — it calls ``read`` again after
    a pause that starts at 1 ms and doubles to 1 s while reads keep failing; a failed ``settle``
    leaves the delivery to the transport (an entry whose settle failed stays pending and is
    delivered again). The fault clears when the same operation next succeeds.

    ``left``, for a settle: what became of the deliveries whose settle failed this way ("the
    entries stayed pending"), said once when the fault clears, with how many failed meanwhile.
    """

    def __init__(self, kind: str, message: str, *, left: str = "") -> None:
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.message = message
        self.left = left


def read_count_option(options: Mapping[str, Any], default: int) -> int:
    """The ``count=`` subscriber option (messages taken per read), checked: an int >= 1."""
    count = options.get("count", default)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigurationError(f"count must be an int >= 1, got {count!r}")
    return count


def check_source_args(
    kind: str,
    names: tuple[str, ...],
    start_at: object,
    *,
    entry_ids: bool = False,
    parameter: str = "start_at",
) -> None:
    """Refuse, with ``ConfigurationError``, the arguments no source can take (and a Redis entry
    id position, unless the source reads Redis streams: ``entry_ids``). ``parameter`` is what
    the source calls its start position, so an error names what the user wrote."""
    if not names:
        raise ConfigurationError(f"{kind} needs at least one stream name")
    for name in names:
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"stream names are non-empty strings, not {name!r}")
    if len(set(names)) != len(names):
        raise ConfigurationError(f"stream names repeat: {names!r}")
    if start_at is not None and not isinstance(start_at, Position):
        raise ConfigurationError(f"{kind}: {parameter} takes a Position, not {start_at!r}")
    if isinstance(start_at, Position) and start_at.kind is PositionKind.ENTRY and not entry_ids:
        raise ConfigurationError(
            f"{kind} cannot start at {start_at!r}: entry ids address Redis streams; use "
            "Position.sequence(n) or Position.timestamp(ms)"
        )


class Sharing(enum.Enum):
    """How the processes that run one subscription share its messages (``run --workers``)."""

    #: Each message goes to one of them: a consumer group, a work queue. Add processes to
    #: share the work.
    SPLIT = "split"
    #: Every process reads every message: a stream file, a Pub/Sub channel, a plain tail or
    #: replay. N processes handle each message N times.
    EVERY = "every"
    #: The stream exists only inside its process (in-process): processes share nothing.
    LOCAL = "local"


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
    def in_process(self) -> Source:
        """The in-process source with the same semantics, for ``app.test()``: a
        ``MemoryStream``, or another source the in-process transport reads (a
        :class:`~trio_streams.memory.channels.MemoryChannel` for a Pub/Sub channel, a
        ``MemoryList``, the work queue a Redis list runs on)."""

    @property
    def seekable(self) -> bool:
        """Whether handlers may seek subscriptions to this source (checked at mount)."""
        return False

    @property
    def sharing(self) -> Sharing:
        """How several processes running this subscription share its messages (the default:
        every process reads every message)."""
        return Sharing.EVERY

    @property
    def consumer_name(self) -> str | None:
        """The consumer name this source fixes, if any: several processes running it would be
        one consumer (``run --workers`` refuses that). None: each process gets its own."""
        return None

    def description(self) -> SourceDescription:
        """How its transport reads it, for documents and traces (see
        :mod:`~trio_streams.core.description`). By default it says nothing: no bindings, no
        group, its broker's ``messaging.system``."""
        return SourceDescription()

    def reads_dead_letter(self, dead_letter: str) -> bool:
        """Whether this source itself reads what its subscription dead-letters to
        ``dead_letter`` (a name, as the subscription's ``dead_letter=`` gives it): every dead
        letter would come back to the same handler, fail again and be dead-lettered again,
        forever. The broker refuses such a subscription at mount. By default, a source whose
        dead letters go to a stream of the same name reads them."""
        return dead_letter in self.streams


class SubscriptionSource(ABC):
    """One mounted subscription's connection to its transport.

    ``read`` returns the deliveries of one read (at least one), or None once the source has
    ended (a replay reached its end, a stream's end-of-stream marker). It may block until there
    is something to read. After returning None it may be called again (a retry or a seek may
    have given the source more to read); it returns None again if not.

    Who calls what: one task, the subscription's driver, calls ``open`` (first), ``poll``,
    ``read`` and ``seek``; the dispatcher's workers call ``settle``, ``dead_letter``,
    ``deferred`` and ``unsettled``; the runner calls ``aclose`` last, whatever happened before.

    What cancellation means, per method (the way Trio's own ABCs say it):

    - ``read``: the driver cancels a blocked read whenever a seek is requested and at shutdown.
      A cancelled read must leave whatever it took recoverable: nothing is lost for a file or an
      in-process stream (the next read returns it); a server transport whose blocking read was
      cancelled with a reply on the wire cannot promise "not taken", only "still pending" (the
      entry stays in the consumer's pending list and is delivered again after a restart or a
      reclaim), and must discard the connection rather than reuse it half-read.
    - ``seek``: called in a shielded scope, so it is never cancelled halfway; it must bound its
      own time (bounded steps, a timeout) and leave the reader where it was if it refuses.
    - ``settle`` / ``dead_letter``: cancelled only when the subscription is abandoned (the drain
      timed out). A settle cut short may or may not have taken effect; a durable transport keeps
      the entry pending, so the worst case is a redelivery, never a loss.
    - ``aclose``: called in a shielded scope with a time limit (10 s): it should flush what it
      collected and release its resources within it.
    - ``open``: cancelled with the app's start; ``aclose`` still runs.
    - ``Transport.publish``: a cancelled publish either published the message or did not;
      transports whose publish is one local step (files, in-process) do it entirely or not at
      all.
    """

    #: True if ``seek`` works; handlers of other sources get a clear error from ``ctx.seeker``.
    seekable: bool = False
    #: True if this source keeps ``retry_after`` delays itself (durably); otherwise the core
    #: holds the delay in a Trio timer and then settles with ``retry()``.
    durable_delay: bool = False
    #: True for a live (tail-following) subscription: a refused seek ends it.
    live: bool = True
    #: Where it starts, for the startup banner, when that is not what its source declares
    #: (a file that does not exist yet, say); None: the declared start.
    starts: str | None = None
    #: The most deliveries one ``read`` returns (0: no fixed bound). Unless the subscription
    #: sets ``buffer``, its delivery channel is made at least this large, so a read fits in it;
    #: it is read once ``open`` has returned, so ``open`` may still set it.
    read_count: int = 0

    #: A graceful stop hands what is queued and not started back to the source at once
    #: (``unsettled(delivery, ABANDONED)``), rather than draining it through the handler: a
    #: consumer group's member, whose work the other members take at once.
    hands_back_at_stop: bool = False

    #: The source settles an ack synchronously, with :meth:`ack_in_line` (a record in memory,
    #: no I/O that can wait): the core's in-line path calls it instead of awaiting ``settle``.
    acks_in_line: bool = False

    def ack_in_line(self, delivery: Delivery) -> bool:
        """Settle the ack of ``delivery`` now, without waiting (only where
        :attr:`acks_in_line` is True); False if it cannot this time, and the core then awaits
        ``settle(delivery, ack())`` as usual."""
        return False

    @property
    def acks_are_noops(self) -> bool:
        """True if ``settle(delivery, ack())`` does nothing for this source, for every delivery
        (a stream file without a durable consumer, an in-process stream without a window): the
        core then ends an acknowledged delivery as a settle would, without calling ``settle``,
        which saves a call per message. Acks only: every other outcome is settled.

        False (the default) unless an ack is provably a no-op: a source that must hear of every
        settle (a pending list, a watermark, a window) keeps it. A source that says True should
        say so only while ``settle`` is its own (see :func:`settles_with`), so a subclass or a
        wrapper that replaces ``settle`` is still called. The core reads it once per run of
        deliveries, not once per subscription."""
        return False

    #: True if this source counts handler runs itself (:meth:`attempt_started`): the core then
    #: tells it of every run before the run begins. Read once per run of deliveries.
    counts_runs: bool = False

    def record_run(self, delivery: Delivery) -> bool:
        """The synchronous form of :meth:`attempt_started`, for the hot path: record the run
        now if that needs no wait and return True; return False (the default) to have the core
        await :meth:`attempt_started` instead. Must not block or raise."""
        del delivery
        return False

    def runs_alone(self, delivery: Delivery) -> bool:
        """True if ``delivery``'s last run did not end (its process died under it, or a stop
        gave up on it): with several handlers at once (``workers=n``, lanes), the core runs it
        while no other handler of the subscription runs, so a message that kills its process
        dies alone and does not take the others' attempts with it. Default False. Called
        synchronously, once per run, by a source that counts runs."""
        del delivery
        return False

    #: True if this source's consumer can die while the subscription goes on, as a process
    #: dies (an in-process work queue or group member, killed by ``TestClient.kill_consumer``):
    #: the core then asks :meth:`died_with_consumer` before handling each delivery, and keeps
    #: each handler's cancel scope so the dead consumer's handlers end where they are.
    #: Default False: the core does neither.
    consumer_can_die: bool = False

    def died_with_consumer(self, delivery: Delivery) -> bool:
        """True if ``delivery`` was read by a consumer that has died since: one not yet handled
        is dropped unhandled (reported stale), one in a handler is cancelled there, as the
        crash would end them. Asked only where :attr:`consumer_can_die` is True."""
        del delivery
        return False

    async def attempt_started(self, delivery: Delivery) -> None:
        """A handler run of ``delivery`` is about to begin (its dependencies, then the handler):
        record it where a later process reads it, before returning, so a run that never
        returns (its process was killed, or a poison message ended it) still counts as an
        attempt. Called only where :attr:`counts_runs` is True, once per run (each attempt in
        an ordered lane, each delivery of a batch).

        An attempt is a handler run and nothing else: a read, a read-ahead, a reclaim, a stop
        or a reconnect is not one, so a source that counts runs gives each delivery the
        attempt ``1 + runs recorded + the retry count of a retry copy``.

        Must not wait for a round trip: it returns once the record is on its way (written to
        the kernel), so the run is counted even if the process dies the next instant.
        Cancelled, the record may or may not have been made; the handler does not run.
        """
        del delivery
        await trio.lowlevel.checkpoint()

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
    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool | None:
        """Carry out ``outcome`` for ``delivery`` (see the settle table in the docs).

        ``retry`` and ``retry_after`` copies carry ``retry_headers(delivery)``. The core calls
        this at most once per delivery; a delivery abandoned without an outcome is never settled.

        Return False when nothing was written (an acknowledgement held for a later flush, or
        one that settles nothing): it says nothing of the server, so a fault an earlier settle
        raised does not clear. None or True: it was carried out, and such faults clear.
        """

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        """Write ``letter`` (a copy of ``delivery`` with ``letter.headers_for(delivery)``) and
        settle ``delivery`` as one step, where the transport can (a Redis stream: XADD, then
        XACK, in one script). Return False, the default, to have the core do it in two steps:
        publish the copy through the transport, then settle the delivery with ``drop()``.

        Cancelled: as ``settle`` — the transport decides what a half-done step leaves (an entry
        whose settle did not complete stays pending and is delivered again).
        """
        await trio.lowlevel.checkpoint()
        return False

    def pipeline(self, delivery: Delivery) -> Pipeline | None:
        """``delivery``'s segment of the pipeline window (``ctx.pipeline``), created at the first
        call; None where the subscription has no window (the default)."""
        del delivery
        return None

    def deferred(self, delivery: Delivery, outcome: Outcome) -> None:
        """The core holds ``delivery`` for ``outcome`` instead of settling it now: a
        ``retry_after`` this source does not keep itself (``durable_delay`` False), settled with
        ``retry()`` once the delay has passed (at once at shutdown); or a retry in an ordered
        lane (``by_key``), which handles the same delivery again in place to keep the key's
        order, and settles it with the outcome of a later attempt.

        Called synchronously when the delay is scheduled, so a source decides what depends on the
        outcome itself (a pipeline window discards the delivery's segment) when the handler
        decided it, not when the delay ends. Must not block or raise. The later ``settle`` (or,
        if the subscription is abandoned first, ``unsettled``) still follows.
        """
        del delivery, outcome  # nothing to do for a source without per-delivery state

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        """``delivery`` ended without a settle, and never will be settled (see :class:`Unsettled`).

        Called synchronously, once per such delivery, at the moment the core lets go of it, so
        a source can tell when no unsettled delivery remains (a pipeline window's flush rule) or
        stop renewing a lease. A durable transport leaves the entry pending, to deliver again.
        Must not block or raise. Every delivery ``read`` returns gets exactly one of ``settle``
        (through a retry copy, a dead letter or an ack) or ``unsettled``.
        """
        del delivery, why  # nothing to do for a source that keeps no per-delivery state

    def lag(self) -> tuple[str, float] | None:
        """How far behind the transport's tip this subscription is, where the transport can
        tell, as ``(unit, amount)``: ``("bytes", n)`` of a stream file not read yet,
        ``("messages", n)`` of a Redis stream its group has not read; None where it cannot
        (the default). Called synchronously (a metrics scrape): must not block."""
        return None

    def deleted_while_pending(self) -> int:
        """Messages deleted at the server while this subscription's transport held them
        pending (read or claimable, not yet settled), so they were never handled, counted
        since it opened: Redis stream entries ``XDEL``ed or trimmed away while in a pending
        list. 0 where a pending message cannot vanish that way (the default). Called
        synchronously (a metrics scrape): must not block."""
        return 0

    def unread(self) -> int:
        """Messages available to read without waiting, where the source can tell (0 if
        unknown). Not a Redis pending list: those are read and not yet settled."""
        return 0

    async def aclose(self) -> None:
        """Release the source after its dispatcher has finished (flush what is collected)."""
        await trio.lowlevel.checkpoint()


class Transport(ABC):
    """A connected broker: it publishes, and opens a reader for each mounted subscription."""

    @abstractmethod
    async def publish(self, destination: str, payload: bytes, headers: Mapping[str, str]) -> Any:
        """Publish one message; returns the transport's receipt (e.g. its position), or None."""

    async def publish_to(
        self, destination: Destination, payload: bytes, headers: Mapping[str, str]
    ) -> Any:
        """Publish to a list or a channel (streams go through ``publish``). Only transports
        whose broker lists those kinds in ``destination_kinds`` are asked."""
        raise UnsupportedError(f"{type(self).__name__} cannot publish to {destination}")

    @abstractmethod
    def open_subscription(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> SubscriptionSource:
        """The reader for one subscription. ``label`` names it in errors and logs."""

    async def unserved(self, destination: Destination) -> str:
        """Why nobody may be serving ``destination`` (a stream with no consumer group, say),
        for a request's timeout message; empty where the transport cannot tell (the default)."""
        del destination
        await trio.lowlevel.checkpoint()
        return ""


def settles_with(source: SubscriptionSource, settle: Callable[..., Any]) -> bool:
    """True while ``source.settle`` is ``settle`` (the function its class defined): not
    overridden by a subclass, replaced on the class, nor set on the instance. For
    ``acks_are_noops``, whose promise is about that ``settle`` only."""
    return type(source).settle is settle and "settle" not in getattr(source, "__dict__", ())
