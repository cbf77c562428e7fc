"""One subscription's member of a Redis consumer group: reads, settles, leases and reclaims.

How it keeps its promises:

- **Nothing lost.** Entries are read with ``XREADGROUP`` on a dedicated connection, so each one
  is in the consumer's pending list (PEL) until it is acknowledged. At open and after every
  reconnect (including a blocking read cancelled mid-reply, which closes its connection) the
  consumer first reads its own pending entries (id ``0``), skipping those it still holds, then
  new ones (``>``).
- **An attempt is a handler run.** A delivery's attempt is 1, plus the handler runs the entry
  had (recorded before each run in the consumer's run journal, :mod:`.journal`, and sent to the
  group's attempt ledger, :mod:`.attempts`; read back for entries delivered again), plus the
  retry-count header of a retry copy. The PEL's delivery
  count, which every read raises, only bounds it: a read-ahead, a stop, a restart, a reclaim
  charge nothing.
- **Names that survive restarts.** The default consumer name is stable for app, subscription,
  host and worker slot, leased so two live processes never share it (:mod:`.names`); a
  restarted process takes back its own pending entries at open.
- **A graceful stop hands back.** After the drain and the last flush, what this consumer still
  has pending (read and never handled, or abandoned) is made claimable at once (``XCLAIM ...
  IDLE``, its count untouched): a restart under the name reads it at open, any other member's
  next reclaim pass (every second) takes it.
- **Settles per read.** Ack and drop collect the read's entry ids in the window
  (:mod:`.window`); one ``XACK`` sends them when every delivery of the read has been settled or
  let go (``unsettled``), or at ``aclose``. With ``pipeline=True`` the same flush carries the
  kept segments first, in commit order, in one pipeline (with ``atomic=True`` each segment is a
  ``MULTI``/``EXEC`` holding its own ``XACK``). A retry is the copy ``XADD`` and then the
  ``XACK``, in one script that stops at a failed ``XADD`` (:mod:`.group_scripts`);
  ``retry_after`` is durable (the copy scheduled in a ZSET and the ``XACK``, in one script;
  :mod:`.delays`); a dead letter is the copy and the ``XACK`` in that same script too (in a
  cluster, where the dead-letter key shares the stream's slot). A failed ``XACK`` is a
  fault: the entries stay pending and are delivered again, never lost.
- **Leases.** While the subscription holds an entry (queued, in a handler, waiting out a delay,
  or acknowledged but not yet flushed) a task renews it with ``XCLAIM ... JUSTID`` every third
  of ``min_idle``, so no other consumer claims a message that is still being handled. Renewal
  stops at the flush or when the core lets the delivery go.
- **Reclaim.** A task runs ``XAUTOCLAIM ... JUSTID`` every second for entries idle past
  ``min_idle`` (dead consumers', handed-back ones; the cursor is kept across passes) and has
  the reader take them from its own PEL. Entries deleted while pending are acknowledged and
  counted. Hygiene: consumers of the group that hold nothing and have been idle
  ``remove_idle_consumers`` seconds are removed, and ledger fields of entries no longer
  pending are swept.
- **Faults.** A lost connection is reported as the fault ``connection`` (health ``degraded``)
  while the reader reconnects with the client's backoff; nothing is re-sent. A vanished group
  (``NOGROUP``) is recreated at the configured start (fault ``nogroup``, counted in
  ``recreated``), paced, or fails the subscription under ``on_nogroup="fail"``.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import trio

from ..core.delivery import RETRY_COUNT_HEADER, Delivery, retry_headers
from ..core.errors import TrioStreamsError, WrongKeyType
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome, OutcomeKind
from ..core.pipeline import Command, CommandCheck, Pipeline
from ..core.positions import PositionKind
from ..core.reporting import with_cause
from ..core.transport import DeadLetter, SourceFault, SubscriptionSource, Unsettled
from .attempts import SWEEP, AttemptLedger, ledger_key, runs_of
from .client import Backoff, Connection, ReadOnlyError, RedisClient, RedisConnectionError
from .client.errors import RedisError, ReplyError
from .companions import companion_key
from .dedicated import DedicatedConnection
from .delays import PROMOTE, SCHEDULE, delay_key, member
from .deliveries import EntryDelivery
from .group_scripts import COPY_THEN_ACK
from .journal import RunJournal, journal_epoch, journal_group, open_journal
from .keytypes import check_dead_letter_key, check_key_type, wrong_type_found
from .names import ConsumerLease
from .streams import NoGroup, RedisStream
from .window import FlushPlan, Window, plan_items, send_items
from .wire import (
    PAYLOAD_FIELD,
    Entry,
    ReplyShapeError,
    decode_fields,
    encode_fields,
    id_before,
    layout_hint,
    parse_autoclaim,
    parse_consumers,
    parse_pending,
    parse_read,
    stream_entries,
    text,
)

__all__ = ["GroupSubscription", "GroupVanished"]

#: How often a group member reads its group's lag (s).
_LAG_EVERY = 2.0


def _group_lag(reply: Any, group: str) -> int | None:
    """The ``lag`` of ``group`` in an ``XINFO GROUPS`` reply (RESP2 lists or RESP3 maps)."""
    for entry in reply or ():
        fields = (
            entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=False))
        )
        named = {text(k): v for k, v in fields.items()}
        if text(named.get("name", b"")) == group:
            lag = named.get("lag")
            return int(lag) if isinstance(lag, int) else None
    return None


_log = logging.getLogger("trio_streams.redis")

#: Error codes of a read whose group or stream is gone (a read blocked when the stream was
#: deleted is woken with UNBLOCKED).
_VANISHED = frozenset({"NOGROUP", "UNBLOCKED"})
#: Seconds a vanished group is remembered: vanishing again within them pauses longer.
_VANISH_MEMORY = 10.0
#: The longest the promoter waits before looking for due copies again (seconds).
_PROMOTE_EVERY = 1.0
#: Ids per XCLAIM / XACK command.
_CHUNK = 1000
#: Seconds between reclaim passes: an entry handed back at a graceful stop (made idle at once)
#: is taken by another member within about this long.
_RECLAIM_EVERY = 1.0
#: The idle time a graceful stop gives what it hands back (ms): past any ``min_idle``.
_HANDED_BACK_IDLE_MS = 10 * 365 * 86_400_000
#: Seconds between hygiene passes (idle consumers removed, the ledger swept).
_HYGIENE_EVERY = 30.0
#: Pending entries a graceful stop looks at to hand back, at most.
_HAND_BACK_MOST = 100_000


class GroupVanished(TrioStreamsError):
    """The consumer group (or its stream) vanished under a subscription with
    ``on_nogroup="fail"``."""


def _lost(exc: BaseException) -> bool:
    return isinstance(exc, RedisConnectionError | ReadOnlyError)


def _attempt(runs: int, headers: dict[str, str]) -> int:
    """A delivery's attempt: 1, plus the handler runs the entry had, plus a retry copy's
    retry count."""
    raw = headers.get(RETRY_COUNT_HEADER)
    if raw is not None:
        try:
            return 1 + runs + max(0, int(raw))
        except ValueError:
            pass
    return 1 + runs


class GroupSubscription(SubscriptionSource):
    """A consumer of a group on one stream; see the module docstring."""

    seekable = False
    #: ``retry_after`` is kept by Redis (a ZSET schedule, see :mod:`.delays`).
    durable_delay = True
    live = True
    #: Handler runs are counted in the attempt ledger (:mod:`.attempts`).
    counts_runs = True

    def __init__(
        self,
        client: RedisClient,
        stream: RedisStream,
        *,
        label: str,
        count: int,
        block_ms: int,
        consumer: str | None,
        atomic_dead_letter: Any,
        window: bool = False,
        atomic: bool = False,
        segment_check: CommandCheck | None = None,
    ) -> None:
        self._client = client
        self._stream = stream
        self._key = stream.key
        self._label = label
        self._count = count
        self.read_count = count
        self._block_ms = block_ms
        #: The name given (None: a stable default, chosen at open).
        self._given_consumer = consumer
        #: This consumer's name, known at open.
        self.consumer = consumer or ""
        #: Set at open: the stream's group, else one per subscription.
        self.group = stream.group or ""
        self._lease: ConsumerLease | None = None
        #: The attempt ledger's writer, made at open (the group is known then).
        self._ledger: AttemptLedger | None = None
        #: Own pending entries are delivered carefully (no journal of this name's predecessor
        #: on this host to read their runs back from).
        self._careful_own = False
        #: The epoch of this group's journals (:func:`~.journal.journal_epoch`), known at open.
        self._epoch = ""
        #: Entries the reclaim task claimed from other consumers, not delivered yet.
        self._claimed: set[str] = set()
        #: Notes a delivery acknowledged in the window (the ledger's, once open).
        self._finished: Callable[[Delivery], None] = lambda delivery: None
        self._ledger_key = ""
        self._atomic_dead_letter = atomic_dead_letter
        self._host: SubscriptionHost | None = None
        self._dedicated = DedicatedConnection(client, stream.key)
        #: Where the next read of this consumer's own pending entries starts (None: read new).
        self._pending_from: str | None = "0"
        #: The last read of new entries was short (the reader is at the tip): see
        #: ``_let_handlers_start``.
        self._caught_up = False
        #: The group's lag as the lag task last read it (None: not known).
        self._lag: int | None = None
        #: Entries held (read, not yet acknowledged or let go): renewed by the lease task.
        self._held: dict[str, Delivery] = {}
        #: While a read of the own pending list is under way: what was acknowledged meanwhile.
        self._acked_during: set[str] | None = None
        #: ``pipeline=True``: handlers have segments (without it the window only batches acks).
        self._windowed = window
        self._window: Window[str] = Window(lambda: Pipeline(segment_check), atomic=atomic)
        #: Flushes leave one after another, so commit order holds across them.
        self._flush_lock = trio.Lock()
        self._flush_wanted = trio.Event()
        self._backoff = Backoff(0.05, 2.0)
        self._nogroup_backoff = Backoff(0.05, 2.0)
        self._vanished_at = float("-inf")
        self._group_missing = False
        self._faulted = False
        #: Set by the reclaim task: the reader reads its own pending list again from the start.
        self._rescan = False
        self._delays = delay_key(stream.key)
        self._promote_wanted = trio.Event()
        #: Seconds until the promoter looks again.
        self._promote_in = 0.0
        self._closed = False
        #: Entries found deleted (or trimmed) while pending: acknowledged and counted.
        self.deleted_pending = 0
        #: Times the group was recreated after it vanished.
        self.recreated = 0
        #: Entries claimed from other consumers (idle past ``min_idle``).
        self.reclaimed = 0
        #: Idle consumers removed from the group (``remove_idle_consumers``).
        self.removed_consumers = 0
        #: Entries a graceful stop handed back (made claimable at once).
        self.handed_back = 0
        #: The ledger sweep's HSCAN cursor.
        self._sweep_cursor = "0"

    # ---- opening -----------------------------------------------------------------------------

    async def open(self, host: SubscriptionHost) -> None:
        self._host = host
        # Named for this app's subscription (``<app>/<subscription>``) whatever the group.
        base = f"{socket.gethostname()}:{host.retry_target}"
        if not self.group:
            # One group per subscription: its members are this subscription in every process
            # of the app, which its own retry target (``<app>/<subscription>``) already names.
            self.group = host.retry_target
        else:
            # A named group's members may be subscriptions of other apps: a retry copy is the
            # group's, and whichever member reads it handles it.
            host.retry_target = f"group:{self.group}"
        await self._create_group()
        self._ledger_key = ledger_key(self._key, self.group)
        await self._check_ledger_type()
        await check_dead_letter_key(self._client, host, "stream", label=self._label)
        lease = self._lease = ConsumerLease(self._client, self._key, self.group, label=self._label)
        self.consumer = await lease.claim(self._given_consumer, base)
        self._epoch = await journal_epoch(self._client, self._key, self.group)
        journal = await open_journal(self._journal_group(), self.consumer, label=self._label)
        ledger = self._ledger = AttemptLedger(
            self._client, self._ledger_key, journal, host, self._held.values,
            self._acknowledge, label=self._label,
        )  # fmt: skip
        await ledger.recover()
        self._careful_own = journal is None or journal.fresh
        # One call less per run on the hot path: the ledger's own methods.
        self.attempt_started = ledger.attempt_started  # type: ignore[method-assign]
        self.record_run = ledger.record_run  # type: ignore[method-assign]
        self._finished = ledger.finished
        host.start_soon(ledger.run, self._flush_lock, name=f"{self._label}: attempt ledger")
        host.start_soon(lease.renew_loop, name=f"{self._label}: consumer name")
        host.start_soon(self._lease_loop, name=f"{self._label}: leases")
        host.start_soon(self._reclaim_loop, name=f"{self._label}: reclaim")
        host.start_soon(self._flush_loop, name=f"{self._label}: flush")
        host.start_soon(self._promote_loop, name=f"{self._label}: delayed retries")
        host.start_soon(self._lag_loop, name=f"{self._label}: lag")

    def _start_id(self) -> str:
        start = self._stream.start
        if start.kind is PositionKind.BEGINNING:
            return "0"
        if start.kind is PositionKind.ENTRY:
            return id_before(start.entry_id)
        return "$"

    async def _create_group(self) -> bool:
        """Create the group (and the stream); True if it was created, False if it existed.

        A stream key or delay set of another type is
        :class:`~trio_streams.core.errors.WrongKeyType`,
        naming the key, the group and what the key holds."""
        try:
            await self._client.execute(
                "XGROUP", "CREATE", self._key, self.group, self._start_id(), "MKSTREAM"
            )
        except ReplyError as exc:
            if exc.code == "WRONGTYPE":
                raise await self._wrong_type() from exc
            if exc.code != "BUSYGROUP":
                raise
            created = False
        else:
            created = True
        await check_key_type(
            self._client, self._delays, "zset", label=self._label,
            role=f"as the delayed retries of group {self.group!r} on stream {self._key!r}",
        )  # fmt: skip
        return created

    async def _wrong_type(self) -> WrongKeyType:
        """The error for a ``WRONGTYPE`` reply about the stream key, saying what it holds."""
        return await wrong_type_found(
            self._client, self._key, "stream", label=self._label,
            role=f"as the stream of consumer group {self.group!r}",
        )  # fmt: skip

    # ---- reading -----------------------------------------------------------------------------

    async def read(self) -> Sequence[Delivery] | None:
        while True:
            if self._rescan:  # the reclaim task claimed entries: take them from the PEL
                self._rescan = False
                self._pending_from = "0"
            try:
                if self._group_missing:
                    await self._recreate()
                conn = await self._connection()
                if self._pending_from is not None:
                    batch = await self._read_own_pending(conn)
                else:
                    if self._caught_up:
                        self._caught_up = False
                        await self._let_handlers_start()
                    reply = await conn.execute(
                        "XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", self._count,
                        "BLOCK", self._block_ms, "STREAMS", self._key, ">",
                    )  # fmt: skip
                    items = stream_entries(reply, self._key)
                    batch = self._deliver_new(items) if items else []
                    self._caught_up = 0 < len(batch) < self._count
            except ReplyError as exc:
                if _lost(exc):
                    await self._connection_lost(exc)
                elif exc.code in _VANISHED:
                    await self._vanished(exc)
                elif exc.code == "WRONGTYPE":  # the key was replaced by one of another type
                    raise await self._wrong_type() from exc
                else:
                    raise
                continue
            except RedisConnectionError as exc:
                await self._connection_lost(exc)
                continue
            if self._faulted:
                self._faulted = False
                self._backoff.succeeded()
                assert self._host is not None
                self._host.clear_fault("connection")
                self._host.clear_fault("nogroup")
            if batch:
                return batch

    @staticmethod
    async def _let_handlers_start() -> None:
        """Two passes through the scheduler before a read that will likely block (the last
        read was short, so the reader is at the tip): the handlers of the deliveries just
        handed over start first (whichever order a pass runs the tasks in, one of the two
        runs them before the read resumes). Sending the read wakes the server, which can
        cost this process its CPU for a while on a busy machine; at the tip the handlers,
        not the next read, are what a message's latency waits for. Cancellable: nothing
        is sent yet."""
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()

    async def _connection(self) -> Connection:
        conn, new = await self._dedicated.get()
        if new:
            self._pending_from = "0"  # a new connection: own pending entries first
        return conn

    async def _connection_lost(self, exc: BaseException) -> None:
        assert self._host is not None
        self._faulted = True
        self._host.report_fault("connection", str(exc), error=exc)
        await self._dedicated.drop(exc)
        self._pending_from = "0"
        await trio.sleep(self._backoff.failed())  # paced, on top of the client's connect pacing

    async def _vanished(self, exc: ReplyError) -> None:
        assert self._host is not None
        if self._stream.on_nogroup is NoGroup.FAIL:
            raise GroupVanished(
                f"{self._label}: consumer group {self.group!r} of stream {self._key!r} vanished "
                f"({exc.message}); on_nogroup='fail'"
            ) from exc
        self._faulted = True
        self._host.report_fault(
            "nogroup", f"group {self.group!r} of stream {self._key!r} vanished: recreating it"
        )
        self._group_missing = True
        # Never a hot loop while it keeps vanishing: the pause doubles (to 2 s) for as long as
        # the group vanished again within the last 10 s.
        now = trio.current_time()
        if now - self._vanished_at > _VANISH_MEMORY:
            self._nogroup_backoff.succeeded()
        self._vanished_at = now
        await trio.sleep(self._nogroup_backoff.failed())

    async def _recreate(self) -> None:
        created = await self._create_group()
        self._group_missing = False
        self._pending_from = "0"
        if created:
            # The runs of the vanished group's entries are not this group's, nor its journals.
            await self._client.execute(
                "DEL", self._ledger_key, companion_key(self._key, f"journal-epoch:{self.group}")
            )
            self.recreated += 1
            _log.warning(
                "%s: consumer group %r of stream %r recreated at %s (it had vanished)",
                self._label, self.group, self._key, self._start_id(),
            )  # fmt: skip

    async def _read_own_pending(self, conn: Connection) -> list[Delivery]:
        """The next entries of this consumer's own pending list that it does not hold.

        Settles keep running meanwhile: an entry acknowledged after the server answered this
        read (so the read still returned it) is noted in ``_acked_during`` and not delivered
        again. Cancelled, it delivers nothing (the entries stay pending)."""
        self._acked_during = set()
        try:
            return await self._read_own_pending_noting(conn)
        finally:
            self._acked_during = None

    async def _read_own_pending_noting(self, conn: Connection) -> list[Delivery]:
        assert self._pending_from is not None and self._acked_during is not None
        reply = await conn.execute(
            "XREADGROUP", "GROUP", self.group, self.consumer, "COUNT", self._count,
            "STREAMS", self._key, self._pending_from,
        )  # fmt: skip
        entries = parse_read(reply).get(self._key) or []
        if not entries:
            self._pending_from = None  # caught up: new entries from now on
            self._careful_own = False  # what this name held before is all delivered
            return []
        self._pending_from = entries[-1].id
        deleted = [e.id for e in entries if e.fields is None and e.id not in self._held]
        if deleted:
            await self._ack_deleted(deleted)
        live = [e for e in entries if e.fields is not None]
        if not live:
            return []
        first, last = live[0].id, live[-1].id
        replies = await conn.execute_many(
            [
                ("XPENDING", self._key, self.group, first, last, len(entries), self.consumer),
                ("HMGET", self._ledger_key, *(e.id for e in live)),
            ]
        )
        replies.raise_first()
        counts = parse_pending(replies[0])
        runs = {e.id: runs_of(value) for e, value in zip(live, replies[1] or (), strict=False)}
        # Only what is still this consumer's and not in hand, as of the XPENDING reply: while
        # these replies were on their way, a settle may have acknowledged an entry the read
        # returned (its XACK ran after the read) or another consumer claimed it.
        held, acked = self._held, self._acked_during
        mine = [e for e in live if e.id in counts and e.id not in held and e.id not in acked]
        return self._deliver(mine, counts, runs) if mine else []

    async def _ack_deleted(self, ids: list[str]) -> None:
        await self._client.execute("XACK", self._key, self.group, *ids)
        await self._forget(ids)
        self.deleted_pending += len(ids)
        _log.warning(
            "%s: %d entries of stream %r were deleted while pending; acknowledged: %s",
            self._label, len(ids), self._key, ", ".join(ids[:10]),
        )  # fmt: skip

    def _deliver_new(self, items: list[Any]) -> list[Delivery]:
        """The deliveries of a read of new entries (``>``), built straight from the reply's
        ``[id, fields]`` items: the hot path, one pass per entry, no :class:`Entry` made.
        Such a read never holds a deleted entry (nil fields): the reply is then refused."""
        key = self._key
        held = self._held
        out: list[Delivery] = []
        append = out.append
        for item in items:
            if type(item) is not list or len(item) != 2:
                raise ReplyShapeError(f"expected an entry [id, fields], got {item!r}")
            raw_id, fields = item
            entry_id = raw_id.decode() if type(raw_id) is bytes else text(raw_id)
            if type(fields) is not list:
                raise ReplyShapeError(f"expected a new entry's fields as a list, got {fields!r}")
            hint = None
            if len(fields) == 2 and fields[0] == PAYLOAD_FIELD:
                payload: bytes = bytes(fields[1])
                headers: dict[str, str] = {}
                attempt = 1
            else:
                payload, headers = decode_fields(fields)
                attempt = _attempt(0, headers)
                hint = None if headers else layout_hint(fields)  # a foreign entry: how to write
            delivery = EntryDelivery(key, entry_id, payload, headers, attempt, entry_id)
            delivery.layout_hint = hint
            held[entry_id] = delivery
            append(delivery)
        self._window.read([d.handle for d in out])
        return out

    def _deliver(
        self, entries: list[Entry], counts: dict[str, int], runs: dict[str, int]
    ) -> list[Delivery]:
        """The deliveries of a read of this consumer's own pending entries (``counts``: the
        PEL delivery count of each, this read included; ``runs``: the handler runs the ledger
        counted). A run needs a read, so the runs counted are bounded by the reads before this
        one: a ledger that outlived its group never charges more."""
        key = self._key
        held = self._held
        ledger = self._ledger
        assert ledger is not None
        claimed, careful_own = self._claimed, self._careful_own
        out: list[Delivery] = []
        for entry in entries:
            assert entry.fields is not None
            payload, headers = decode_fields(entry.fields)
            entry_id = entry.id
            counted = ledger.counted(entry_id, runs.get(entry_id, 0))
            counted = min(counted, counts.get(entry_id, 1) - 1)
            delivery = EntryDelivery(
                key, entry_id, payload, headers, _attempt(counted, headers), entry_id
            )
            delivery.runs = delivery.counted_at_read = counted
            delivery.layout_hint = None if headers else layout_hint(entry.fields)
            delivery.suspect = counted > 0
            # Another consumer's (claimed), or this name's from before a start with no journal
            # of its predecessor here: each run goes to Redis before it begins.
            delivery.careful = careful_own or entry_id in claimed
            claimed.discard(entry_id)
            held[entry_id] = delivery
            out.append(delivery)
        ledger.read_back(runs)
        self._window.read([d.handle for d in out])
        return out

    # ---- runs --------------------------------------------------------------------------------

    async def _acknowledge(self, ids: list[str]) -> None:
        """Settle entries a dead consumer's handlers had finished (its journal says so), as
        its flush would have (``XACK``, and ``XDEL`` for ``delete_on_ack``)."""
        for i in range(0, len(ids), _CHUNK):
            pipeline = self._client.pipeline()
            for command in self._settle_commands(ids[i : i + _CHUNK]):
                pipeline.add(*command)
            (await pipeline.execute()).raise_first()

    def _journal_group(self) -> str:
        """The server, stream, group and epoch, as this group's journals name them."""
        return journal_group(self._client, self._key, self.group, self._epoch)

    def record_run(self, delivery: Delivery) -> bool:
        """Replaced at open by the ledger's (see :mod:`.attempts`)."""
        assert self._ledger is not None
        return self._ledger.record_run(delivery)

    async def attempt_started(self, delivery: Delivery) -> None:
        """Replaced at open by the ledger's (see :mod:`.attempts`)."""
        assert self._ledger is not None
        await self._ledger.attempt_started(delivery)

    def runs_alone(self, delivery: Delivery) -> bool:
        """An entry that came back with runs: its last run died with its process."""
        return bool(getattr(delivery, "suspect", False))

    async def _forget(self, ids: Sequence[str]) -> None:
        """Entries settled by a step of their own leave the ledger."""
        if self._ledger is not None:
            await self._ledger.forget(ids)

    async def _check_ledger_type(self) -> None:
        await check_key_type(
            self._client, self._ledger_key, "hash", label=self._label,
            role=f"as the attempt ledger of group {self.group!r} (this project's key: delete it)",
        )  # fmt: skip

    # ---- settling ----------------------------------------------------------------------------

    def pipeline(self, delivery: Delivery) -> Pipeline | None:
        if not self._windowed:
            return None
        return self._window.segment(delivery.handle)

    def deferred(self, delivery: Delivery, outcome: Outcome) -> None:
        del outcome  # held for a retry: the handler's outcome discards its segment now
        if self._window.holds(delivery.handle):
            self._window.decide_segment(delivery.handle, keep=False)

    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        entry_id: str = delivery.handle
        kind = outcome.kind
        if kind is OutcomeKind.ACK or kind is OutcomeKind.DROP:  # (an Enum hashes in Python)
            if not self._windowed:  # no segment to lose: a successor may acknowledge it
                self._finished(delivery)
            if self._window.consumed(entry_id, keep=kind is OutcomeKind.ACK):
                return await self._flush()
            return False  # held for the read's one XACK
        assert self._host is not None
        copy = encode_fields(delivery.payload, retry_headers(delivery, self._host.retry_target))
        with self._settling(entry_id, "retry"):
            if outcome.kind is OutcomeKind.RETRY_AFTER:
                await self._schedule(copy, entry_id, outcome.delay)
            else:
                await self._copy_and_ack(self._key, copy, entry_id)
        await self._forget((entry_id,))  # the copy counts its tries in its retry-count header
        return True

    @contextmanager
    def _settling(self, entry_id: str, what: str) -> Iterator[None]:
        """Around a settle that writes: a Redis error is a fault (the entry stays pending, to
        be delivered again), and either way the entry is no longer this read's to acknowledge."""
        delivery = self._held.get(entry_id)  # held until the settle is over (see finally)
        try:
            yield
        except RedisError as exc:
            if delivery is not None and self._ledger is not None:
                self._ledger.let_go(delivery)  # pending still: its runs must reach Redis
            raise SourceFault(
                "settle",
                f"{what} of entry {entry_id} failed (it stays pending): {exc}",
                left="the entries stayed pending",
            ) from exc
        else:
            self._note_acked((entry_id,))
        finally:
            self._held.pop(entry_id, None)
            if self._window.settled_alone(entry_id):
                self._flush_wanted.set()

    async def _copy_and_ack(self, stream: str, fields: Sequence[Any], entry_id: str) -> None:
        """XADD ``fields`` to ``stream``, then XACK ``entry_id``, in one script: an ``XADD``
        that fails stops it before the ``XACK`` (:data:`~.group_scripts.COPY_THEN_ACK`)."""
        await self._client.execute(
            "EVAL", COPY_THEN_ACK, 2, stream, self._key, self.group, entry_id, *fields
        )

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        if not self._atomic_dead_letter(letter.destination):
            await trio.lowlevel.checkpoint()
            return False
        entry_id: str = delivery.handle
        fields = encode_fields(delivery.payload, letter.headers_for(delivery))
        with self._settling(entry_id, "dead letter"):
            await self._copy_and_ack(letter.destination, fields, entry_id)
        await self._forget((entry_id,))
        return True

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        del why  # whatever the reason, the entry stays pending and is delivered again
        entry_id: str = delivery.handle
        self._held.pop(entry_id, None)
        if self._ledger is not None:
            self._ledger.let_go(delivery)
        if self._window.let_go(entry_id):
            self._flush_wanted.set()  # ``unsettled`` cannot wait: the flush task sends it

    async def _flush(self) -> bool:
        """Send what the window decided (one plan at a time, in commit order); False when
        there was nothing to send. A failure is a :class:`SourceFault`: entries whose settle
        failed stay pending, delivered again."""
        async with self._flush_lock:
            plan = self._window.take()
            if plan is None:
                await trio.lowlevel.checkpoint()
                return False
            await self._send(plan)
            return True

    def _settle_commands(self, ids: Sequence[str]) -> list[Command]:
        ledger = [] if self._ledger is None else self._ledger.settle_commands(ids)
        if self._stream.delete_on_ack:  # a work queue: acknowledged means gone, atomically
            return [("XACK", self._key, self.group, *ids), ("XDEL", self._key, *ids), *ledger]
        return [("XACK", self._key, self.group, *ids), *ledger]

    async def _send(self, plan: FlushPlan[str]) -> None:
        items = plan_items(plan, settle=self._settle_commands, chunk=_CHUNK)
        # Held until the reply is in: a read of the own pending list meanwhile skips them.
        try:
            replies = await send_items(self._client, items)
        except RedisError as exc:
            # A lost connection is not the messages' doing: their runs are not charged.
            self._release(plan.tokens, pending=True, uncharge=_lost(exc))
            raise SourceFault(
                "flush",
                f"flush of {len(plan.tokens)} acknowledgements and {len(plan.segments)} "
                f"segments failed (the entries stay pending): {exc}",
            ) from exc
        except BaseException:
            self._release(plan.tokens, pending=True)
            raise
        failures = _failures(items, replies)
        self._release(plan.tokens, pending=bool(failures))
        if failures:
            raise SourceFault("flush", f"flush of {len(items)} items: {'; '.join(failures)}")
        self._note_acked(plan.tokens)
        if self._ledger is not None:
            self._ledger.settled(plan.tokens)

    def _release(self, ids: Sequence[str], *, pending: bool, uncharge: bool = False) -> None:
        """``ids`` are no longer held; ``pending``: their settle failed, so they stay pending
        and their runs must reach Redis (``uncharge``: less the runs whose settle was lost)."""
        held, ledger = self._held, self._ledger
        for entry_id in ids:
            delivery = held.pop(entry_id, None)
            if pending and delivery is not None and ledger is not None:
                if uncharge:
                    ledger.uncharge(delivery)
                else:
                    ledger.let_go(delivery)

    def _note_acked(self, ids: Sequence[str]) -> None:
        """``ids`` were acknowledged: a pending read under way must not deliver them again."""
        if self._acked_during is not None:
            self._acked_during.update(ids)

    async def _flush_loop(self) -> None:
        """Send the acks of reads whose last delivery was let go (``unsettled`` cannot wait)."""
        assert self._host is not None
        while True:
            await self._flush_wanted.wait()
            self._flush_wanted = trio.Event()
            try:
                sent = await self._flush()
            except SourceFault as exc:
                self._host.report_fault("flush", exc.message, error=exc)
            else:
                if sent:  # cleared by a flush the server took, never by one of nothing
                    self._host.clear_fault("flush")

    # ---- delayed retries ----------------------------------------------------------------------

    async def _schedule(self, copy: list[bytes | str], entry_id: str, delay: float) -> None:
        delay_ms = max(0, round(delay * 1000))
        await self._client.execute(
            "EVAL", SCHEDULE, 2, self._delays, self._key, delay_ms, member(copy), self.group,
            entry_id,
        )  # fmt: skip
        if delay < self._promote_in:
            self._promote_wanted.set()  # sooner than the promoter planned to look

    async def _promote_loop(self) -> None:
        """Move due copies back to the stream (see :mod:`.delays`), sleeping until the next is
        due, at most ``_PROMOTE_EVERY`` (copies other consumers scheduled are due too)."""
        assert self._host is not None
        while True:
            try:
                wait_ms = await self._client.execute(
                    "EVAL", PROMOTE, 2, self._delays, self._key, 100
                )
            except RedisError as exc:
                self._host.report_fault("delayed", f"promoting delayed retries: {exc}", error=exc)
                wait_ms = -1
            else:
                self._host.clear_fault("delayed")
                self._host.answered()  # a failed flush or renewal is over too (host.py)
            wait = _PROMOTE_EVERY if wait_ms < 0 else min(_PROMOTE_EVERY, wait_ms / 1000)
            self._promote_in = wait
            with trio.move_on_after(wait):
                await self._promote_wanted.wait()
            self._promote_wanted = trio.Event()

    # ---- leases and reclaim ------------------------------------------------------------------

    async def _lease_loop(self) -> None:
        """Keep held entries fresh so no other consumer claims them (see the module docstring).

        Cancelled with the subscription's tasks: renewal stops, and what is still held stays
        pending for this consumer's next start or another consumer's reclaim."""
        assert self._host is not None
        interval = self._stream.min_idle / 3
        while True:
            await trio.sleep(interval)
            ids = list(self._held)
            if not ids:
                continue
            try:
                for i in range(0, len(ids), _CHUNK):
                    await self._client.execute(
                        "XCLAIM", self._key, self.group, self.consumer, 0,
                        *ids[i : i + _CHUNK], "JUSTID",
                    )  # fmt: skip
            except RedisError as exc:
                self._host.report_fault("lease", f"renewing {len(ids)} entries: {exc}", error=exc)
            else:
                self._host.clear_fault("lease")

    def lag(self) -> tuple[str, float] | None:
        """Entries of the stream the group has not read yet (``XINFO GROUPS``' ``lag``, as
        last read by the lag task), or None before it is known."""
        return None if self._lag is None else ("messages", float(self._lag))

    def deleted_while_pending(self) -> int:
        """Entries found deleted (or trimmed) while pending, by a read of this consumer's
        own pending list or by a reclaim pass: acknowledged, never handled."""
        return self.deleted_pending

    async def _lag_loop(self) -> None:
        """Every ``_LAG_EVERY`` s, read the group's lag (for metrics). Its failures are not
        faults: the next pass tries again. Cancelled with the subscription."""
        while True:
            try:
                reply = await self._client.execute("XINFO", "GROUPS", self._key)
            except RedisError:
                self._lag = None
            else:
                self._lag = _group_lag(reply, self.group)
            await trio.sleep(_LAG_EVERY)

    async def _reclaim_loop(self) -> None:
        """Claim entries idle past ``min_idle`` (a dead consumer's), then have the reader take
        them from this consumer's own pending list. The cursor is kept across passes."""
        assert self._host is not None
        min_idle_ms = max(1, int(self._stream.min_idle * 1000))
        interval = min(self._stream.min_idle / 2, _RECLAIM_EVERY)
        cursor = "0-0"
        hygiene_due = trio.current_time()
        remove_idle = self._stream.remove_idle_consumers
        hygiene_every = (
            _HYGIENE_EVERY if remove_idle is None else min(_HYGIENE_EVERY, remove_idle / 2)
        )
        while True:
            if cursor == "0-0":
                await trio.sleep(interval)
            try:
                reply = await self._client.execute(
                    "XAUTOCLAIM", self._key, self.group, self.consumer, min_idle_ms, cursor,
                    "COUNT", 100, "JUSTID",
                )  # fmt: skip
            except RedisError as exc:
                cursor = "0-0"
                if not (isinstance(exc, ReplyError) and exc.code == "NOGROUP"):
                    self._host.report_fault("reclaim", str(exc), error=exc)
                continue
            self._host.clear_fault("reclaim")
            cursor, claimed, deleted = parse_autoclaim(reply)
            if deleted:
                self.deleted_pending += len(deleted)
                _log.warning(
                    "%s: %d entries of stream %r were deleted while pending",
                    self._label, len(deleted), self._key,
                )  # fmt: skip
            taken = [c for c in map(text, claimed) if c not in self._held]
            if taken and self._ledger is not None:  # their dead holders' runs on this host
                peers = await trio.to_thread.run_sync(RunJournal.peers, self._journal_group())
                finished = await self._ledger.adopt(taken, peers)
                taken = [c for c in taken if c not in finished]
            if taken:
                self._claimed.update(taken)
                self.reclaimed += len(taken)
                self._rescan = True  # the reader takes them from its own pending list
            if cursor == "0-0" and trio.current_time() >= hygiene_due:
                hygiene_due = trio.current_time() + hygiene_every
                if self._stream.remove_idle_consumers is not None:
                    await self._remove_idle_consumers(self._stream.remove_idle_consumers)
                await self._sweep_ledger()

    async def _sweep_ledger(self) -> None:
        """One step of the ledger's sweep: fields of entries no longer pending (a crash
        between an acknowledgement and its field's removal) are removed (:data:`SWEEP`)."""
        assert self._host is not None
        try:
            cursor = await self._client.execute(
                "EVAL", SWEEP, 2, self._ledger_key, self._key, self.group, self._sweep_cursor, 200
            )
        except RedisError as exc:
            if not (isinstance(exc, ReplyError) and exc.code == "NOGROUP"):
                self._host.report_fault("hygiene", f"sweeping the attempt ledger: {exc}", error=exc)
            return
        self._sweep_cursor = text(cursor)

    async def _remove_idle_consumers(self, idle: float) -> None:
        """Remove the group's other consumers that hold nothing and have been idle ``idle``
        seconds (a consumer with pending entries is left for the reclaim to empty first)."""
        assert self._host is not None
        try:
            consumers = parse_consumers(
                await self._client.execute("XINFO", "CONSUMERS", self._key, self.group)
            )
            for name, pending, idle_ms in consumers:
                if name != self.consumer and pending == 0 and idle_ms >= idle * 1000:
                    await self._client.execute("XGROUP", "DELCONSUMER", self._key, self.group, name)
                    self.removed_consumers += 1
                    _log.info(
                        "%s: removed idle consumer %r of group %r", self._label, name, self.group
                    )
        except RedisError as exc:
            if not (isinstance(exc, ReplyError) and exc.code == "NOGROUP"):
                self._host.report_fault("hygiene", f"removing idle consumers: {exc}", error=exc)

    # ---- closing -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            async with self._flush_lock:
                plan = self._window.stop()
                if plan is None:
                    await trio.lowlevel.checkpoint()
                else:
                    await self._send(plan)
            await self._hand_back()
        finally:
            try:
                await self._dedicated.drop(None)
                if self._ledger is not None:
                    self._ledger.close()
            finally:
                if self._lease is not None:
                    await self._lease.release()

    async def _hand_back(self) -> None:
        """What this consumer still has pending after its last flush (read and never handed to
        a handler, a read a stop cut short, deliveries abandoned at the drain's end) is made
        claimable at once: ``XCLAIM ... IDLE`` far past any ``min_idle``, ``JUSTID`` so its
        delivery count stays as it was, and the attempt ledger untouched (a run under way when
        the drain gave up counts; a read does not). The next member's reclaim pass takes it,
        or this consumer's name at its next open. A failure is logged: the entries stay pending
        and are reclaimed after ``min_idle``, as after a crash."""
        if self._lease is None or not self._lease.name:  # the name was never this one's
            await trio.lowlevel.checkpoint()
            return
        try:
            start = "-"
            handed = 0
            while handed < _HAND_BACK_MOST:
                reply = await self._client.execute(
                    "XPENDING", self._key, self.group, start, "+", _CHUNK, self.consumer
                )
                ids = list(parse_pending(reply))
                if not ids:
                    break
                await self._client.execute(
                    "XCLAIM", self._key, self.group, self.consumer, 0, *ids,
                    "IDLE", _HANDED_BACK_IDLE_MS, "JUSTID",
                )  # fmt: skip
                handed += len(ids)
                if len(ids) < _CHUNK:
                    break
                start = "(" + ids[-1]
        except RedisError as exc:
            _log.warning(
                "%s: could not hand back the pending entries of consumer %r (they are reclaimed "
                "after min_idle): %s", self._label, self.consumer, with_cause(exc),
            )  # fmt: skip
            return
        if handed:
            self.handed_back += handed
            _log.info(
                "%s: handed back %d entries read but not handled (claimable at once)",
                self._label, handed,
            )  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"<GroupSubscription {self._label!r} stream={self._key!r} group={self.group!r} "
            f"consumer={self.consumer!r}>"
        )


def _failures(items: Sequence[Command | list[Command]], replies: Sequence[Any]) -> list[str]:
    """What went wrong in a flush's replies, one line each: a segment command that failed
    (the entry is still acknowledged: Redis has no rollback), or a settle that failed (the
    entry stays pending)."""
    out: list[str] = []
    for item, reply in zip(items, replies, strict=True):
        if isinstance(reply, RedisError):
            what = "MULTI/EXEC of a segment" if isinstance(item, list) else _name(item)
            out.append(f"{what}: {reply}")
        elif isinstance(item, list) and isinstance(reply, list):
            for command, result in zip(item, reply, strict=False):
                if isinstance(result, RedisError):
                    out.append(f"{_name(command)} inside MULTI/EXEC: {result}")
    return out


def _name(command: Command) -> str:
    name = command[0]
    return name if isinstance(name, str) else name.decode(errors="replace")
