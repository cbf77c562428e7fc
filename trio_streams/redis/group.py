"""One subscription's member of a Redis consumer group: opens, settles, closes.

Its parts, one module per job, share the member (:mod:`.group_member`: stream, group,
consumer name, what it holds, its attempt ledger):

- **Nothing lost.** The read (:mod:`.group_read`): ``XREADGROUP`` on a dedicated connection,
  so each entry is in the consumer's pending list (PEL) until it is acknowledged; its own
  pending entries first at open and after every reconnect, then new ones.
- **An attempt is a handler run.** A delivery's attempt is 1, plus the handler runs the entry
  had (the run journal, :mod:`.journal`, and the group's attempt ledger, :mod:`.attempts`),
  plus the retry-count header of a retry copy: a read-ahead, a stop, a restart, a reclaim
  charge nothing.
- **Names that survive restarts.** The default consumer name is stable for app, subscription,
  host and worker slot, leased so two live processes never share it (:mod:`.names`); a
  restarted process takes back its own pending entries at open.
- **Settles per read.** Ack and drop collect the read's entry ids in the window
  (:mod:`.window`, sent by its shell, :mod:`.window_shell`); one ``XACK`` sends them when every
  delivery of the read has been settled or let go (``unsettled``), or at ``aclose``. With
  ``pipeline=True`` the same flush carries the kept segments first, in commit order, in one
  pipeline (with ``atomic=True`` each segment is a ``MULTI``/``EXEC`` holding its own
  ``XACK``). A retry is the copy ``XADD`` and then the ``XACK``, in one script that stops at a
  failed ``XADD`` (:mod:`.group_scripts`); ``retry_after`` is durable (the copy scheduled in a
  ZSET and the ``XACK``, in one script; :mod:`.delays`); a dead letter is the copy and the
  ``XACK`` in that same script too (in a cluster, where the dead-letter key shares the
  stream's slot). A failed ``XACK`` is a fault: the entries stay pending and are delivered
  again, never lost.
- **Maintenance.** Leases renew what is held and a graceful stop hands back what is left
  (:mod:`.group_leases`); idle entries of dead consumers are reclaimed (:mod:`.group_reclaim`);
  idle consumers are removed and the ledger swept (:mod:`.group_hygiene`); the group's lag is
  read for metrics (:mod:`.group_lag`).
- **Faults.** A lost connection is reported as the fault ``connection`` (health ``degraded``)
  while the reader reconnects with the client's backoff; nothing is re-sent. A vanished group
  (``NOGROUP``) is recreated at the configured start (fault ``nogroup``), paced, or fails the
  subscription under ``on_nogroup="fail"``.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import trio

from ..core.delivery import Delivery, retry_headers
from ..core.group_moves import GroupMoveRefused, shared_group_refusal
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome, OutcomeKind
from ..core.pipeline import Command, CommandCheck, Pipeline
from ..core.positions import Position
from ..core.transport import DeadLetter, SeekRefused, SourceFault, SubscriptionSource, Unsettled
from .attempts import AttemptLedger, ledger_key
from .client import RedisClient
from .client.errors import RedisError
from .delays import Promoter
from .group_hygiene import GroupHygiene
from .group_lag import GroupLag
from .group_leases import hand_back, renew_leases
from .group_member import CHUNK, GroupMember
from .group_position import live_consumers, move_group, refuse_position
from .group_read import GroupReader, GroupVanished
from .group_reclaim import reclaim
from .group_scripts import COPY_THEN_ACK
from .journal import journal_epoch, open_journal
from .keytypes import check_dead_letter_key, check_key_type
from .names import ConsumerLease
from .streams import RedisStream
from .window import FlushPlan
from .window_shell import WindowShell
from .wire import encode_fields, parse_pending

__all__ = ["GroupSubscription", "GroupVanished"]

_log = logging.getLogger("trio_streams.redis")

#: Seconds a handler's seek of a group may take (it counts entries: see :mod:`.group_position`).
_SEEK_TIMEOUT = 30.0


class GroupSubscription(SubscriptionSource):
    """A consumer of a group on one stream; see the module docstring."""

    #: A seek moves the whole group (:meth:`seek`).
    seekable = True
    #: ``retry_after`` is kept by Redis (a ZSET schedule, see :mod:`.delays`).
    durable_delay = True
    live = True
    #: Handler runs are counted in the attempt ledger (:mod:`.attempts`).
    counts_runs = True
    #: An ack that leaves its read incomplete joins the read's one ``XACK`` in memory
    #: (:meth:`ack_in_line`); the one that completes it is awaited, as it sends the flush.
    acks_in_line = True

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
        self._key = stream.key
        self._label = label
        self.read_count = count
        member = self._member = GroupMember(client, stream, label, consumer=consumer or "")
        #: The name given (None: a stable default, chosen at open).
        self._given_consumer = consumer
        self._lease: ConsumerLease | None = None
        self._atomic_dead_letter = atomic_dead_letter
        self._host: SubscriptionHost | None = None
        self._shell: WindowShell[str] = WindowShell(
            client, self, windowed=window, atomic=atomic, segment_check=segment_check,
            chunk=CHUNK,
        )  # fmt: skip
        self._reader = GroupReader(member, self._shell, count=count, block_ms=block_ms)
        self._promoter = Promoter(client, stream.key, write="XADD")
        self._lag = GroupLag(member)
        self._closed = False
        self._shared_seek = stream.shared_seek
        #: Entries held when a seek moved the group: read at the old position, acknowledged
        #: as skipped if the seek makes them stale (the others settle as their handlers say).
        self._cut: set[str] = set()

    @property
    def consumer(self) -> str:
        """This consumer's name (the one given, else chosen at open)."""
        return self._member.consumer

    @property
    def group(self) -> str:
        """The group (the stream's, else one per subscription, known at open)."""
        return self._member.group

    # ---- opening -----------------------------------------------------------------------------

    async def open(self, host: SubscriptionHost) -> None:
        member = self._member
        member.host = self._host = host
        # Named for this app's subscription (``<app>/<subscription>``) whatever the group.
        base = f"{socket.gethostname()}:{host.retry_target}"
        if not member.group:
            # One group per subscription: its members are this subscription in every process
            # of the app, which its own retry target (``<app>/<subscription>``) already names.
            member.group = host.retry_target
        else:
            # A named group's members may be subscriptions of other apps: a retry copy is the
            # group's, and whichever member reads it handles it.
            host.retry_target = f"group:{member.group}"
        await self._reader.create_group()
        member.ledger_key = ledger_key(self._key, member.group)
        await self._check_ledger_type()
        await check_dead_letter_key(self._client, host, "stream", label=self._label)
        lease = self._lease = ConsumerLease(
            self._client, self._key, member.group, label=self._label
        )
        member.consumer = await lease.claim(self._given_consumer, base)
        member.epoch = await journal_epoch(self._client, self._key, member.group)
        journal = await open_journal(member.journal_group(), member.consumer, label=self._label)
        ledger = member.ledger = AttemptLedger(
            self._client, member.ledger_key, journal, host, member.held.values,
            self._acknowledge, label=self._label,
        )  # fmt: skip
        await ledger.recover()
        self._reader.careful_own = journal is None or journal.fresh
        # One call less per run on the hot path: the ledger's own methods.
        self.attempt_started = ledger.attempt_started  # type: ignore[method-assign]
        self.record_run = ledger.record_run  # type: ignore[method-assign]
        self._shell.finished = ledger.finished
        hygiene = GroupHygiene(member)
        host.start_soon(ledger.run, self._shell.lock, name=f"{self._label}: attempt ledger")
        host.start_soon(lease.renew_loop, name=f"{self._label}: consumer name")
        host.start_soon(renew_leases, member, name=f"{self._label}: leases")
        host.start_soon(
            reclaim, member, hygiene, self._reader.claimed, name=f"{self._label}: reclaim"
        )
        host.start_soon(self._shell.flush_loop, host, name=f"{self._label}: flush")
        host.start_soon(self._promoter.run, host, name=f"{self._label}: delayed retries")
        host.start_soon(self._lag.run, name=f"{self._label}: lag")

    async def _check_ledger_type(self) -> None:
        await check_key_type(
            self._client, self._member.ledger_key, "hash", label=self._label,
            role=f"as the attempt ledger of group {self.group!r} (this project's key: delete it)",
        )  # fmt: skip

    # ---- reading -----------------------------------------------------------------------------

    async def read(self) -> Sequence[Delivery] | None:
        return await self._reader.read()

    # ---- seeking -----------------------------------------------------------------------------

    async def seek(self, position: Position) -> None:
        """Move the whole group to ``position`` (``XGROUP SETID``, :mod:`.group_position`).

        Refused (``SeekRefused``, nothing moved) where the position cannot address the stream,
        or other consumers of the group are live and the subscription does not say
        ``shared_seek=True``. Once it has moved: what this consumer read itself and no handler
        has started is acknowledged when the core purges it (skipped, as the Seeking contract
        says); what a handler is running settles as the handler says; the rest of its pending
        list is acknowledged now (:meth:`_sweep_pending`). Entries claimed from other
        consumers are never acknowledged by a seek, read or not: owed to those consumers'
        work, a purged one is let go (pending still, its runs as they were) and delivered
        again from this consumer's pending list. The next read waits until nothing held at
        the seek is, takes what is owed, then reads after the new position. Nothing here
        charges an attempt: an entry read again is a new delivery. Bounded: refused after
        30 s (the group may have moved by then)."""
        m = self._member
        self._cut = set()  # a refused seek skips nothing: what it purges stays pending
        held: set[str] = set()
        with trio.move_on_after(_SEEK_TIMEOUT) as bounded:
            try:
                refuse_position(position, m.key)
                if not self._shared_seek:
                    others = await live_consumers(m.client, m.key, m.group, besides=m.consumer)
                    if others:
                        raise SeekRefused(shared_group_refusal(self._label, m.key, m.group, others))
                move = await move_group(m.client, m.key, m.group, position)
                held = set(m.held)
                self._cut = {i for i in held if not getattr(m.held[i], "claimed", False)}
                swept = await self._sweep_pending()
            except GroupMoveRefused as exc:
                raise SeekRefused(f"{self._label}: seek to {position!r} refused: {exc}") from exc
            except RedisError as exc:
                raise SeekRefused(f"{self._label}: seek to {position!r} failed: {exc}") from exc
        if bounded.cancelled_caught:
            raise SeekRefused(
                f"{self._label}: seek to {position!r} did not finish within {_SEEK_TIMEOUT:g} s "
                "(the group may have moved)"
            )
        self._reader.after_seek(held)
        _log.info(
            "%s: seek: %s; %d pending entries of this consumer acknowledged",
            self._label, move.describe(), swept,
        )  # fmt: skip

    async def _sweep_pending(self) -> int:
        """After a seek moved the group: acknowledge what this consumer has pending and holds
        no delivery of (a read the seek cut short, entries from before its start or a
        reconnect), except entries claimed from other consumers and not in hand (not read
        yet, or let go), which it owes them. What lies after the new position the group
        delivers again. Returns how many."""
        m = self._member
        async with m.claim_lock:
            claimed = self._reader.claimed_ids
            start, swept = "-", 0
            while True:
                reply = await m.client.execute(
                    "XPENDING", m.key, m.group, start, "+", CHUNK, m.consumer
                )
                ids = list(parse_pending(reply))
                drop = [i for i in ids if i not in m.held and i not in claimed]
                if drop:
                    await self._acknowledge(drop)
                    if m.ledger is not None:
                        m.ledger.settled(drop)
                    swept += len(drop)
                if len(ids) < CHUNK:
                    return swept
                start = "(" + ids[-1]

    def lag(self) -> tuple[str, float] | None:
        """Entries of the stream the group has not read yet (``XINFO GROUPS``' ``lag``, as
        last read by the lag task), or None before it is known."""
        lag = self._lag.value
        return None if lag is None else ("messages", float(lag))

    def deleted_while_pending(self) -> int:
        """Entries found deleted (or trimmed) while pending, by a read of this consumer's
        own pending list or by a reclaim pass: acknowledged, never handled."""
        return self._member.deleted_pending

    # ---- runs --------------------------------------------------------------------------------

    async def _acknowledge(self, ids: list[str]) -> None:
        """Settle entries a dead consumer's handlers had finished (its journal says so), as
        its flush would have (``XACK``, and ``XDEL`` for ``delete_on_ack``)."""
        for i in range(0, len(ids), CHUNK):
            pipeline = self._client.pipeline()
            for command in self._member.settle_commands(ids[i : i + CHUNK]):
                pipeline.add(*command)
            (await pipeline.execute()).raise_first()

    def record_run(self, delivery: Delivery) -> bool:
        """Replaced at open by the ledger's (see :mod:`.attempts`)."""
        assert self._member.ledger is not None
        return self._member.ledger.record_run(delivery)

    async def attempt_started(self, delivery: Delivery) -> None:
        """Replaced at open by the ledger's (see :mod:`.attempts`)."""
        assert self._member.ledger is not None
        await self._member.ledger.attempt_started(delivery)

    def runs_alone(self, delivery: Delivery) -> bool:
        """An entry that came back with runs: its last run died with its process."""
        return bool(getattr(delivery, "suspect", False))

    async def _forget(self, ids: Sequence[str]) -> None:
        """Entries settled by a step of their own leave the ledger."""
        if self._member.ledger is not None:
            await self._member.ledger.forget(ids)

    # ---- settling ----------------------------------------------------------------------------

    def pipeline(self, delivery: Delivery) -> Pipeline | None:
        return self._shell.pipeline(delivery)

    def ack_in_line(self, delivery: Delivery) -> bool:
        """``settle(delivery, ack())`` where it holds the ack for the read's flush and sends
        nothing (no segment, the read not complete yet): done now, True; else False."""
        return self._shell.consumed_in_line(delivery)

    def deferred(self, delivery: Delivery, outcome: Outcome) -> None:
        del outcome  # held for a retry: the handler's outcome discards its segment now
        self._shell.deferred(delivery)

    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        kind = outcome.kind
        if kind is OutcomeKind.ACK or kind is OutcomeKind.DROP:  # (an Enum hashes in Python)
            if self._shell.consumed(delivery, keep=kind is OutcomeKind.ACK):
                return await self._shell.flush()
            return False  # held for the read's one XACK
        assert self._host is not None
        entry_id: str = delivery.handle
        copy = encode_fields(delivery.payload, retry_headers(delivery, self._host.retry_target))
        with self._settling(entry_id, "retry"):
            if outcome.kind is OutcomeKind.RETRY_AFTER:
                await self._promoter.schedule(
                    copy, outcome.delay, self._key, "XACK", self.group, entry_id
                )
            else:
                await self._copy_and_ack(self._key, copy, entry_id)
        await self._forget((entry_id,))  # the copy counts its tries in its retry-count header
        return True

    @contextmanager
    def _settling(self, entry_id: str, what: str) -> Iterator[None]:
        """Around a settle that writes: a Redis error is a fault (the entry stays pending, to
        be delivered again), and either way the entry is no longer this read's to acknowledge."""
        held, ledger = self._member.held, self._member.ledger
        delivery = held.get(entry_id)  # held until the settle is over (see finally)
        try:
            yield
        except RedisError as exc:
            if delivery is not None and ledger is not None:
                ledger.let_go(delivery)  # pending still: its runs must reach Redis
            self._owed_back(delivery)
            raise SourceFault(
                "settle",
                f"{what} of entry {entry_id} failed (it stays pending): {exc}",
                left="the entries stayed pending",
            ) from exc
        else:
            self._reader.note_acked((entry_id,))
        finally:
            self._member.let_out(entry_id)
            self._shell.settled_alone(entry_id)

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
        entry_id: str = delivery.handle
        if entry_id in self._cut and why in (Unsettled.STALE, Unsettled.PURGED):
            # Read at the position a seek moved the group from: acknowledged, as skipped.
            self._cut.discard(entry_id)
            self._shell.consumed_later(delivery)
            return
        # Whatever else the reason, the entry stays pending and is delivered again.
        self._member.let_out(entry_id)
        if self._member.ledger is not None:
            self._member.ledger.let_go(delivery)
        self._owed_back(delivery)
        self._shell.let_go(entry_id)

    def _owed_back(self, delivery: Delivery | None) -> None:
        """A delivery of an entry claimed from another consumer was let go, pending still:
        the reader takes it again from this consumer's pending list (a seek's sweep spares
        it meanwhile), so the dead consumer's work is done."""
        if delivery is not None and getattr(delivery, "claimed", False):
            self._reader.claimed([delivery.handle])

    # ---- the window shell's settler ----------------------------------------------------------

    def settle_commands(self, tokens: Sequence[str]) -> list[Command]:
        return self._member.settle_commands(tokens)

    def unsent(self, plan: FlushPlan[str], exc: RedisError, *, lost: bool) -> str:
        # A lost connection is not the messages' doing: their runs are not charged.
        self._release(plan.tokens, pending=True, uncharge=lost)
        return (
            f"flush of {len(plan.tokens)} acknowledgements and {len(plan.segments)} "
            f"segments failed (the entries stay pending): {exc}"
        )

    def interrupted(self, plan: FlushPlan[str]) -> None:
        self._release(plan.tokens, pending=True)

    async def flushed(self, plan: FlushPlan[str], *, failed: bool) -> None:
        # No checkpoint: what the server took is noted before anything else can run.
        self._release(plan.tokens, pending=failed)
        if failed:
            return
        self._reader.note_acked(plan.tokens)
        if self._member.ledger is not None:
            self._member.ledger.settled(plan.tokens)

    def _release(self, ids: Sequence[str], *, pending: bool, uncharge: bool = False) -> None:
        """``ids`` are no longer held; ``pending``: their settle failed, so they stay pending
        and their runs must reach Redis (``uncharge``: less the runs whose settle was lost)."""
        member, ledger = self._member, self._member.ledger
        for entry_id in ids:
            delivery = member.let_out(entry_id)
            if pending and delivery is not None and ledger is not None:
                if uncharge:
                    ledger.uncharge(delivery)
                else:
                    ledger.let_go(delivery)
            if pending:
                self._owed_back(delivery)

    # ---- closing -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            await self._shell.stop()
            if self._lease is not None and self._lease.name:  # the name is this one's
                await hand_back(self._member)
            else:
                await trio.lowlevel.checkpoint()
        finally:
            try:
                await self._reader.drop()
                if self._member.ledger is not None:
                    self._member.ledger.close()
            finally:
                if self._lease is not None:
                    await self._lease.release()

    def __repr__(self) -> str:
        return (
            f"<GroupSubscription {self._label!r} stream={self._key!r} group={self.group!r} "
            f"consumer={self.consumer!r}>"
        )
