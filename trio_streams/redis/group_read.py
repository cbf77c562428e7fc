"""The read of a consumer group member: its own pending entries first, then new ones.

Entries are read with ``XREADGROUP`` on a dedicated connection, so each one is in the
consumer's pending list (PEL) until it is acknowledged. At open, after every reconnect
(including a blocking read cancelled mid-reply, which closes its connection), after the group
was recreated and when the reclaim task claimed entries, the consumer first reads its own
pending entries (id ``0``), skipping those it still holds, then new ones (``>``).

A delivery's attempt is 1, plus the handler runs the entry had (the attempt ledger's count,
read back for entries delivered again, bounded by the PEL's delivery count: a run needs a
read), plus the retry-count header of a retry copy. A lost connection is the fault
``connection`` while the reader reconnects (paced); a vanished group (``NOGROUP``) is
recreated at the configured start (fault ``nogroup``), paced, or fails the subscription
under ``on_nogroup="fail"``.
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..core.delivery import RETRY_COUNT_HEADER, Delivery
from ..core.errors import TrioStreamsError, WrongKeyType
from ..core.positions import PositionKind
from .attempts import runs_of
from .client import Backoff, Connection, ReadOnlyError, RedisConnectionError
from .client.errors import ReplyError
from .companions import companion_key
from .dedicated import DedicatedConnection
from .delays import delay_key
from .deliveries import EntryDelivery
from .group_member import GroupMember
from .keytypes import check_key_type, wrong_type_found
from .streams import NoGroup
from .window_shell import WindowShell
from .wire import (
    PAYLOAD_FIELD,
    Entry,
    ReplyShapeError,
    decode_fields,
    id_before,
    layout_hint,
    parse_pending,
    parse_read,
    stream_entries,
    text,
)

__all__ = ["GroupReader", "GroupVanished"]

_log = logging.getLogger("trio_streams.redis")

#: Error codes of a read whose group or stream is gone (a read blocked when the stream was
#: deleted is woken with UNBLOCKED).
_VANISHED = frozenset({"NOGROUP", "UNBLOCKED"})
#: Seconds a vanished group is remembered: vanishing again within them pauses longer.
_VANISH_MEMORY = 10.0


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


class GroupReader:
    """Reads for one group member (see the module docstring); what it returns is held by the
    member and has a slot in the window of ``shell``."""

    def __init__(
        self, member: GroupMember, shell: WindowShell[str], *, count: int, block_ms: int
    ) -> None:
        self._member = member
        self._shell = shell
        self._count = count
        self._block_ms = block_ms
        self._dedicated = DedicatedConnection(member.client, member.key)
        #: Where the next read of this consumer's own pending entries starts (None: read new).
        self._pending_from: str | None = "0"
        #: The last read of new entries was short (the reader is at the tip): see
        #: ``_let_handlers_start``.
        self._caught_up = False
        #: While a read of the own pending list is under way: what was acknowledged meanwhile.
        self._acked_during: set[str] | None = None
        #: Own pending entries are delivered carefully (no journal of this name's predecessor
        #: on this host to read their runs back from): set at open.
        self.careful_own = False
        #: Entries the reclaim task claimed from other consumers, not delivered yet.
        self._claimed: set[str] = set()
        #: Set by the reclaim task: the own pending list is read again from the start.
        self._rescan = False
        self._backoff = Backoff(0.05, 2.0)
        self._nogroup_backoff = Backoff(0.05, 2.0)
        self._vanished_at = float("-inf")
        self._group_missing = False
        self._faulted = False
        #: Entries held when a seek moved the group: the next read waits until none is, so an
        #: entry read again after a seek back is never held twice.
        self._superseded: set[str] = set()

    # ---- the group ---------------------------------------------------------------------------

    def start_id(self) -> str:
        """Where a group created now starts (the stream's ``start``)."""
        start = self._member.stream.start
        if start.kind is PositionKind.BEGINNING:
            return "0"
        if start.kind is PositionKind.ENTRY:
            return id_before(start.entry_id)
        return "$"

    async def create_group(self) -> bool:
        """Create the group (and the stream); True if it was created, False if it existed.

        A stream key or delay set of another type is
        :class:`~trio_streams.core.errors.WrongKeyType`,
        naming the key, the group and what the key holds."""
        m = self._member
        try:
            await m.client.execute("XGROUP", "CREATE", m.key, m.group, self.start_id(), "MKSTREAM")
        except ReplyError as exc:
            if exc.code == "WRONGTYPE":
                raise await self._wrong_type() from exc
            if exc.code != "BUSYGROUP":
                raise
            created = False
        else:
            created = True
        await check_key_type(
            m.client, delay_key(m.key), "zset", label=m.label,
            role=f"as the delayed retries of group {m.group!r} on stream {m.key!r}",
        )  # fmt: skip
        return created

    async def _wrong_type(self) -> WrongKeyType:
        """The error for a ``WRONGTYPE`` reply about the stream key, saying what it holds."""
        m = self._member
        return await wrong_type_found(
            m.client, m.key, "stream", label=m.label,
            role=f"as the stream of consumer group {m.group!r}",
        )  # fmt: skip

    # ---- reading -----------------------------------------------------------------------------

    async def read(self) -> list[Delivery]:
        """The next deliveries (never none): reconnects, recreates a vanished group, and
        waits as long as it takes. Cancelled, it delivers nothing (what a reply held stays
        pending, read again from the own pending list)."""
        if self._superseded:
            await self._member.wait_released(self._superseded)
            self._superseded = set()
        while True:
            if self._rescan:  # the reclaim task claimed entries: take them from the PEL
                self._rescan = False
                self._pending_from = "0"
            try:
                batch = await self._read_once()
            except ReplyError as exc:
                await self._read_refused(exc)
                continue
            except RedisConnectionError as exc:
                await self._connection_lost(exc)
                continue
            if self._faulted:
                self._faulted = False
                self._backoff.succeeded()
                host = self._member.host
                assert host is not None
                host.clear_fault("connection")
                host.clear_fault("nogroup")
            if batch:
                return batch

    async def _read_once(self) -> list[Delivery]:
        if self._group_missing:
            await self._recreate()
        conn = await self._connection()
        if self._pending_from is not None:
            return await self._read_own_pending(conn)
        if self._caught_up:
            self._caught_up = False
            await self._let_handlers_start()
        m = self._member
        reply = await conn.execute(
            "XREADGROUP", "GROUP", m.group, m.consumer, "COUNT", self._count,
            "BLOCK", self._block_ms, "STREAMS", m.key, ">",
        )  # fmt: skip
        items = stream_entries(reply, m.key)
        batch = self._deliver_new(items) if items else []
        self._caught_up = 0 < len(batch) < self._count
        return batch

    async def _read_refused(self, exc: ReplyError) -> None:
        if _lost(exc):
            await self._connection_lost(exc)
        elif exc.code in _VANISHED:
            await self._vanished(exc)
        elif exc.code == "WRONGTYPE":  # the key was replaced by one of another type
            raise await self._wrong_type() from exc
        else:
            raise exc

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
        assert self._member.host is not None
        self._faulted = True
        self._member.host.report_fault("connection", str(exc), error=exc)
        await self._dedicated.drop(exc)
        self._pending_from = "0"
        await trio.sleep(self._backoff.failed())  # paced, on top of the client's connect pacing

    async def _vanished(self, exc: ReplyError) -> None:
        m = self._member
        assert m.host is not None
        if m.stream.on_nogroup is NoGroup.FAIL:
            raise GroupVanished(
                f"{m.label}: consumer group {m.group!r} of stream {m.key!r} vanished "
                f"({exc.message}); on_nogroup='fail'"
            ) from exc
        self._faulted = True
        m.host.report_fault(
            "nogroup", f"group {m.group!r} of stream {m.key!r} vanished: recreating it"
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
        created = await self.create_group()
        self._group_missing = False
        self._pending_from = "0"
        if created:
            m = self._member
            # The runs of the vanished group's entries are not this group's, nor its journals.
            await m.client.execute(
                "DEL", m.ledger_key, companion_key(m.key, f"journal-epoch:{m.group}")
            )
            _log.warning(
                "%s: consumer group %r of stream %r recreated at %s (it had vanished)",
                m.label, m.group, m.key, self.start_id(),
            )  # fmt: skip

    async def drop(self) -> None:
        """Close the dedicated connection (at close)."""
        await self._dedicated.drop(None)

    # ---- what other parts tell the read ------------------------------------------------------

    def after_seek(self, held: set[str]) -> None:
        """A seek moved the group while this consumer held ``held``: the next read waits until
        they are settled or let go (see :meth:`read`), then takes the entries claimed from
        other consumers that are still pending (owed to their work, whatever the seek), then
        reads after the new position."""
        self._superseded = set(held)
        self._caught_up = False
        if self._claimed:
            self._rescan = True

    @property
    def claimed_ids(self) -> frozenset[str]:
        """Entries claimed from other consumers and not in hand: not delivered yet, or let go
        unhandled and pending still."""
        return frozenset(self._claimed)

    def claimed(self, ids: list[str]) -> None:
        """The reclaim task claimed ``ids`` from other consumers (or a delivery of one was let
        go, pending still): the reader takes them from its own pending list, and delivers them
        carefully."""
        self._claimed.update(ids)
        self._rescan = True

    def note_acked(self, ids: tuple[str, ...] | list[str]) -> None:
        """``ids`` were acknowledged: a pending read under way must not deliver them again."""
        if self._acked_during is not None:
            self._acked_during.update(ids)

    # ---- the own pending list ----------------------------------------------------------------

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
        m = self._member
        reply = await conn.execute(
            "XREADGROUP", "GROUP", m.group, m.consumer, "COUNT", self._count,
            "STREAMS", m.key, self._pending_from,
        )  # fmt: skip
        entries = parse_read(reply).get(m.key) or []
        if not entries:
            self._pending_from = None  # caught up: new entries from now on
            self.careful_own = False  # what this name held before is all delivered
            return []
        self._pending_from = entries[-1].id
        deleted = [e.id for e in entries if e.fields is None and e.id not in m.held]
        if deleted:
            await self._ack_deleted(deleted)
        live = [e for e in entries if e.fields is not None]
        if not live:
            return []
        first, last = live[0].id, live[-1].id
        replies = await conn.execute_many(
            [
                ("XPENDING", m.key, m.group, first, last, len(entries), m.consumer),
                ("HMGET", m.ledger_key, *(e.id for e in live)),
            ]
        )
        replies.raise_first()
        counts = parse_pending(replies[0])
        runs = {e.id: runs_of(value) for e, value in zip(live, replies[1] or (), strict=False)}
        # Only what is still this consumer's and not in hand, as of the XPENDING reply: while
        # these replies were on their way, a settle may have acknowledged an entry the read
        # returned (its XACK ran after the read) or another consumer claimed it.
        held, acked = m.held, self._acked_during
        mine = [e for e in live if e.id in counts and e.id not in held and e.id not in acked]
        return self._deliver(mine, counts, runs) if mine else []

    async def _ack_deleted(self, ids: list[str]) -> None:
        m = self._member
        await m.client.execute("XACK", m.key, m.group, *ids)
        if m.ledger is not None:  # settled by a step of its own: it leaves the ledger
            await m.ledger.forget(ids)
        m.deleted_pending += len(ids)
        _log.warning(
            "%s: %d entries of stream %r were deleted while pending; acknowledged: %s",
            m.label, len(ids), m.key, ", ".join(ids[:10]),
        )  # fmt: skip

    # ---- deliveries --------------------------------------------------------------------------

    def _deliver_new(self, items: list[Any]) -> list[Delivery]:
        """The deliveries of a read of new entries (``>``), built straight from the reply's
        ``[id, fields]`` items: the hot path, one pass per entry, no :class:`Entry` made.
        Such a read never holds a deleted entry (nil fields): the reply is then refused."""
        key = self._member.key
        held = self._member.held
        out: list[Delivery] = []
        append = out.append
        for item in items:
            if type(item) is not list or len(item) != 2:
                raise ReplyShapeError(f"expected an entry [id, fields], got {item!r}")
            raw_id, fields = item
            entry_id = raw_id.decode() if type(raw_id) is bytes else text(raw_id)
            if entry_id in held:
                # Read again after a seek back while its delivery from this consumer's own
                # pending list (an entry claimed from another) is in hand: that delivery
                # settles it, never two at once.
                continue
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
        self._shell.read([d.handle for d in out])
        return out

    def _deliver(
        self, entries: list[Entry], counts: dict[str, int], runs: dict[str, int]
    ) -> list[Delivery]:
        """The deliveries of a read of this consumer's own pending entries (``counts``: the
        PEL delivery count of each, this read included; ``runs``: the handler runs the ledger
        counted). A run needs a read, so the runs counted are bounded by the reads before this
        one: a ledger that outlived its group never charges more."""
        key = self._member.key
        held = self._member.held
        ledger = self._member.ledger
        assert ledger is not None
        claimed, careful_own = self._claimed, self.careful_own
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
            delivery.claimed = entry_id in claimed
            delivery.careful = careful_own or delivery.claimed
            claimed.discard(entry_id)
            held[entry_id] = delivery
            out.append(delivery)
        ledger.read_back(runs)
        self._shell.read([d.handle for d in out])
        return out
