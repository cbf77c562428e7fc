"""A reliable Redis list subscription: a processing list per consumer, heartbeats and a reaper.

How it keeps its promises:

- **Nothing lost.** One round trip on a dedicated connection moves up to ``count`` entries
  into this consumer's processing list: a ``BLMOVE`` (waiting at most ``block`` ms) followed,
  in the same write, by ``count - 1`` non-blocking ``LMOVE``s. An entry stays in the
  processing list until its settle removes that exact value (``LREM key 1 value``).
- **Its own list first.** At open, and after every reconnect (a blocking move cancelled with
  its reply on the wire closes its connection), the consumer first reads its own processing
  list (``LRANGE``) and delivers, oldest first, what it does not hold: a restart with the same
  ``consumer`` name takes back what it had when it died (at open, counting each entry as
  delivered again: :data:`~.list_scripts.TAKE_BACK`).
- **An attempt is a handler run.** An entry's attempt is 1, plus the tries its retry copy
  carries, plus the handler runs it had at consumers that died holding it (or stopped before
  settling it), which the reaper and the take-back write into the entry itself
  (:data:`~.frames.REDELIVERED_HEADER`). Each run is recorded before it begins: in the
  consumer's run journal (:mod:`.journal`, shared memory: no system call), sent to the
  consumer's attempt ledger (:func:`~.lists.attempts_key`, runs by the value's SHA-1) when it
  is older than :data:`~.attempts.SHIP_EVERY` and still held; the reaper first adds what a dead
  consumer's journal on this host recorded and had not sent. So ``max_attempts`` stops an entry
  that kills every consumer that runs it (it is then dead-lettered or dropped without being
  handled again), and an entry that was only read — waiting in a dead consumer's buffer, read
  by a read that a stop cut short — goes back uncharged.
- **Heartbeat and reaper.** The consumer keeps ``{key}:heartbeat:<consumer>`` alive with a TTL
  (``heartbeat`` s), renewed every third of it by a task of the subscription, and is listed in
  ``{key}:consumers``. Every ``reap_every`` s each consumer's reaper runs one script per other
  consumer (:data:`~.list_scripts.REAP`) that, only if that heartbeat has expired, moves the
  whole processing list back to the front of the list, atomically: two reapers never move an
  entry twice. A consumer that stalls longer than its heartbeat may find an entry reaped
  under it: the entry is handled again (at-least-once), and its late ``LREM`` removes nothing.
- **Settles.** ack and drop are collected by the pipeline window (:mod:`.window`) and sent as
  one ``LREM`` per entry, in one pipeline per read (with ``pipeline=True``, after the kept
  segments; with ``atomic=True`` each segment is a ``MULTI``/``EXEC`` holding its entry's
  ``LREM``). A retry is the copy (with the retry-count header) pushed at the back of the list
  and then the ``LREM``, in one script (:data:`~.list_scripts.COPY_THEN_REMOVE`: a push that
  fails, onto a key turned into another type, stops it before the ``LREM``, so the original
  stays); ``retry_after`` is the copy scheduled in the durable delay set and the ``LREM``, in
  one script; a dead letter is the copy (with the reason headers) and the ``LREM`` in that
  same script where the dead-letter key shares the list's cluster slot, else one after the
  other (a crash between may write the letter twice; a failed write never reaches the
  ``LREM``).
- **A graceful close** sends what the window holds, then moves whatever is left in the
  processing list (deliveries abandoned at shutdown) back to the list at once, and removes the
  heartbeat: nothing waits for a reaper.
- **Faults.** A lost connection is the fault ``connection`` while the reader reconnects
  (paced); a failed heartbeat, reaper pass or flush is reported as ``heartbeat``, ``reap`` or
  ``flush`` and retried. An entry whose settle or flush failed stays in the processing list,
  and the reader delivers it again from there on its next read. A key of another type is
  :class:`~.lists.WrongKeyType`.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import secrets
from collections import Counter, deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import trio

from ..core.delivery import Delivery
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome, OutcomeKind
from ..core.pipeline import Command, CommandCheck, Pipeline
from ..core.reporting import with_cause
from ..core.transport import DeadLetter, SourceFault, Unsettled
from .attempts import SHIP_EVERY
from .client import RedisClient
from .client.connection import Connection
from .client.errors import ReadOnlyError, RedisConnectionError, RedisError, ReplyError
from .frames import REDELIVERED_HEADER
from .journal import RunJournal, journal_epoch, journal_group, open_journal
from .list_base import ListSubscriptionBase, lost, wrong_type
from .list_scripts import COPY_THEN_REMOVE, REAP, RENEW, TAKE_BACK
from .lists import (
    ConsumerNameInUse,
    RedisList,
    WrongKeyType,
    attempts_key,
    consumers_key,
    heartbeat_key,
    processing_key,
)
from .window import FlushPlan, Window, plan_items, send_items

__all__ = ["ReliableListSubscription"]

_log = logging.getLogger("trio_streams.redis")

#: The journal key of how many copies of a value (its SHA-1 follows) are finished, their
#: removal not sent.
_DONE = "done:"

#: Beyond a renewal period (a third of the heartbeat), how long a consumer opening under a
#: name whose heartbeat lives watches for a renewal before it takes the name over (s).
_RENEWAL_SLACK = 0.25


class ReliableListSubscription(ListSubscriptionBase):
    """A consumer of one list with its own processing list; see the module docstring."""

    #: Handler runs are counted (the journal and the attempt ledger).
    counts_runs = True

    def __init__(
        self,
        client: RedisClient,
        source: RedisList,
        *,
        label: str,
        count: int,
        block_ms: int,
        consumer: str,
        same_slot: Any,
        window: bool = False,
        atomic: bool = False,
        segment_check: CommandCheck | None = None,
    ) -> None:
        super().__init__(
            client, source, label=label, count=count, block_ms=block_ms, same_slot=same_slot
        )
        self.consumer = consumer
        key = source.key
        self.processing = processing_key(key, consumer)
        self._heartbeat = heartbeat_key(key, consumer)
        self._consumers = consumers_key(key)
        self._attempts = attempts_key(key, consumer)
        self._journal: RunJournal | None = None
        #: Per held delivery: the SHA-1 of its value and its runs in this consumer's hands.
        self._digests: dict[int, str] = {}
        self._runs: dict[int, int] = {}
        #: Runs of the values held now (equal values share one count), as the ledger has them
        #: once sent: digest -> runs.
        self._totals: dict[str, int] = {}
        #: Digests whose count changed, by the journal record of the change.
        self._changed: dict[str, int] = {}
        #: Digests Redis has a field for.
        self._in_ledger: set[str] = set()
        #: Runs of values let go unsettled (they stay in the processing list and are taken back
        #: from it): the first equal value taken back carries them.
        self._let_go_runs: Counter[bytes] = Counter()
        #: Ledger commands removals made, sent after the settle that removed them.
        self._ledger_commands: list[tuple[str, str, str, int] | tuple[str, str, str]] = []
        #: Tokens finished in the window (acknowledged or dropped, removal not sent), and how
        #: many of each value's copies are.
        self._finished: dict[int, int] = {}
        self._done: Counter[str] = Counter()
        #: Tokens of entries that came back with runs (they run alone).
        self._suspects: set[int] = set()
        self._covered = 0
        self._epoch = ""
        self._ttl_ms = max(10, round(source.heartbeat * 1000))
        #: What this subscription writes into its heartbeat: whose the name is now.
        self._token = f"{consumer}:{secrets.token_hex(8)}"
        end = self._end.word
        first = ("BLMOVE", key, self.processing, end, "LEFT", self._block_s)
        self._moves: list[tuple[Any, ...]] = [first]
        self._moves += [("LMOVE", key, self.processing, end, "LEFT")] * (count - 1)
        self._tokens = itertools.count(1)
        #: The value of each delivery held (read, not yet settled or let go), by token.
        self._values: dict[int, bytes] = {}
        #: The next take-back is the first since open: what it finds, this consumer held when
        #: it died (a restart under its name), so each entry is counted as delivered again.
        self._first_take_back = True
        #: How many deliveries of each value are held (a list may hold equal values).
        self._held: Counter[bytes] = Counter()
        #: While this consumer reads its own processing list: what settles removed meanwhile.
        self._removed_during: Counter[bytes] | None = None
        #: Read the own processing list before moving new entries (at open, after reconnects).
        self._rescan = True
        #: Entries of the own processing list still to hand out.
        self._backlog: deque[bytes] = deque()
        self._windowed = window
        self._window: Window[int] = Window(lambda: Pipeline(segment_check), atomic=atomic)
        self._flush_lock = trio.Lock()
        self._flush_wanted = trio.Event()
        #: Entries of this consumer's own processing list delivered again (a restart, a
        #: reconnect).
        self.taken_back = 0
        #: Entries this consumer's reaper moved back from dead consumers' processing lists.
        self.reaped = 0
        #: Settles that found their entry gone (a reaper moved it while it was handled).
        self.vanished = 0

    # ---- opening -----------------------------------------------------------------------------

    async def open(self, host: SubscriptionHost) -> None:
        await super().open(host)
        await self.check_type(self.processing, role="as this consumer's processing list")
        await self.check_type(self._consumers, "set", "as the list's set of consumers")
        await self.check_type(self._attempts, "hash", "as this consumer's attempt ledger")
        # Alive before anything is read: from now on no reaper takes this processing list.
        await self._claim_name()
        self._epoch = await journal_epoch(self._client, self._key)
        self._journal = await open_journal(self._journal_group(), self.consumer, label=self._label)
        host.start_soon(self._ship_loop, name=f"{self._label}: attempt ledger")
        host.start_soon(self._heartbeat_loop, name=f"{self._label}: heartbeat")
        host.start_soon(self._reap_loop, name=f"{self._label}: reaper")
        host.start_soon(self._flush_loop, name=f"{self._label}: flush")

    async def _claim_name(self) -> None:
        """Take this consumer's name: its heartbeat, with this subscription's token.

        Held by nobody: taken at once. Held (the heartbeat lives): either a consumer of that
        name died without a word, less than a heartbeat ago — restarting under its name, this
        one takes over its processing list — or another live consumer goes by it. Watches the
        heartbeat for a renewal period: renewed, the name is in use
        (:class:`~.lists.ConsumerNameInUse`); not renewed, its holder is dead, and the name is
        taken over at once, before the heartbeat would have expired."""
        client, key, ttl = self._client, self._heartbeat, self._ttl_ms
        if await client.execute("SET", key, self._token, "NX", "PX", ttl) is not None:
            await self._listed()
            return
        watch = ttl / 3000 + _RENEWAL_SLACK
        last = int(await client.execute("PTTL", key))
        with trio.move_on_after(watch):
            while True:
                await trio.sleep(max(0.005, ttl / 30000))
                if await client.execute("SET", key, self._token, "NX", "PX", ttl) is not None:
                    await self._listed()  # it expired meanwhile
                    return
                now = int(await client.execute("PTTL", key))
                if now > last:
                    raise ConsumerNameInUse(
                        f"{self._label}: another live consumer of list {self._key!r} goes by "
                        f"the name {self.consumer!r} (its heartbeat {key!r} is being renewed); "
                        "give each consumer its own name, or leave consumer= out"
                    )
                last = now
        _log.warning(
            "%s: taking over consumer %r of list %r: its heartbeat was not renewed for %.1f s, "
            "so its last holder is gone",
            self._label, self.consumer, self._key, watch,
        )  # fmt: skip
        await client.execute("SET", key, self._token, "PX", ttl)
        await self._listed()

    async def _listed(self) -> None:
        await self._client.execute("SADD", self._consumers, self.consumer)

    async def _beat(self) -> None:
        """Renew the heartbeat; :class:`~.lists.ConsumerNameInUse` if another consumer took
        the name over (this one stalled past a renewal period and was taken for dead, or
        another goes by the same name)."""
        renewed = await self._client.execute(
            "EVAL", RENEW, 2, self._heartbeat, self._consumers,
            self._token, self._ttl_ms, self.consumer,
        )  # fmt: skip
        if not renewed:
            raise ConsumerNameInUse(
                f"{self._label}: consumer name {self.consumer!r} of list {self._key!r} was "
                "taken over by another consumer (this one stalled past its heartbeat's renewal "
                "period, or another goes by the same name); give each consumer its own name"
            )

    # ---- reading -----------------------------------------------------------------------------

    async def read(self) -> Sequence[Delivery] | None:
        while True:
            try:
                conn, new = await self._dedicated.get()
                if new:
                    self._rescan = True  # a new connection: the own processing list first
                if self._rescan:
                    await self._take_back(conn)
                if self._backlog:
                    take = min(self._count, len(self._backlog))
                    batch = [self._backlog.popleft() for _ in range(take)]
                    self.read_succeeded()
                    return self._hand_out(batch)
                replies = await conn.execute_many(self._moves)
                values: list[bytes] = []
                for reply in replies:
                    if isinstance(reply, RedisError):
                        raise reply
                    if reply is not None:
                        values.append(bytes(reply))
            except ReplyError as exc:
                if lost(exc):
                    await self._reconnect(exc)
                    continue
                if exc.code == "WRONGTYPE":
                    await self._wrong_type(exc)
                raise
            except RedisConnectionError as exc:
                await self._reconnect(exc)
                continue
            self.read_succeeded()
            if values:
                return self._hand_out(values)

    async def _reconnect(self, exc: BaseException) -> None:
        self._rescan = True
        await self.connection_lost(exc)

    async def _wrong_type(self, exc: ReplyError) -> None:
        """Raise :class:`WrongKeyType` naming which key holds another type."""
        for key in (self._key, self.processing):
            try:
                await self.check_type(key)
            except WrongKeyType as found:
                raise found from exc
        raise wrong_type(self._label, self._key, exc) from exc

    async def _take_back(self, conn: Connection) -> None:
        """Queue, oldest first, the entries of the own processing list that are not held.

        Settles keep running meanwhile: an entry removed after the server answered (so the
        reply still holds it) is noted in ``_removed_during`` and not queued. Cancelled, it
        queues nothing (the entries stay in the processing list; the next read looks again)."""
        self._removed_during = Counter()
        try:
            if self._first_take_back:  # nothing is held yet: charge the runs they had
                done = await self._adopt(self.consumer)
                values = await conn.execute(
                    "EVAL", TAKE_BACK, 2, self.processing, self._attempts, REDELIVERED_HEADER,
                    *done,
                )  # fmt: skip
                self._first_take_back = False
                if self._journal is not None:  # what a predecessor recorded is charged now
                    self._journal.mark_sent(self._journal.last)
                    self._covered = self._journal.last
            else:
                values = await conn.execute("LRANGE", self.processing, 0, -1)
            removed = self._removed_during
        finally:
            self._removed_during = None
        self._rescan = False
        self._backlog.clear()
        spare = Counter(bytes(v) for v in values)
        spare.subtract(self._held)
        spare.subtract(removed)
        for raw in reversed(values):  # the newest first in the list: hand out the oldest first
            value = bytes(raw)
            if spare[value] > 0:
                spare[value] -= 1
                self._backlog.append(value)
        if self._backlog:
            self.taken_back += len(self._backlog)
            _log.info(
                "%s: taking back %d entries of processing list %r",
                self._label, len(self._backlog), self.processing,
            )  # fmt: skip

    def _hand_out(self, values: list[bytes]) -> list[Delivery]:
        out: list[Delivery] = []
        tokens: list[int] = []
        held, stored = self._held, self._values
        let_go = self._let_go_runs
        for value in values:
            token = next(self._tokens)
            stored[token] = value
            held[value] += 1
            tokens.append(token)
            delivery, again = self.delivery_and_runs(value, token)
            if let_go and let_go[value] > 0:  # taken back: the runs it had in this process
                runs = let_go.pop(value)
                delivery.attempt += runs
                self._runs[token] = runs
                self._digests[token] = hashlib.sha1(value).hexdigest()
                again += runs
            if again:
                self._suspects.add(token)
            out.append(delivery)
        self._window.read(tokens)
        return out

    # ---- runs --------------------------------------------------------------------------------

    def _journal_group(self) -> str:
        return journal_group(self._client, "list", self._key, self._epoch)

    def _add_runs(self, token: int, change: int) -> str:
        """Add ``change`` to the runs of ``token`` and of its value; returns the digest."""
        digest = self._digests.get(token)
        if digest is None:
            digest = self._digests[token] = hashlib.sha1(self._values[token]).hexdigest()
        self._runs[token] = self._runs.get(token, 0) + change
        self._add_total(digest, change)
        return digest

    def runs_alone(self, delivery: Delivery) -> bool:
        """An entry that came back with runs: its last run died with its process."""
        return delivery.handle in self._suspects

    def record_run(self, delivery: Delivery) -> bool:
        """Record the run in the journal (the hot path); False without a journal."""
        if self._journal is None or delivery.handle not in self._values:
            return False
        self._add_runs(delivery.handle, 1)
        return True

    async def attempt_started(self, delivery: Delivery) -> None:
        """Without a journal: the run goes to the ledger, acknowledged, before it begins."""
        if self.record_run(delivery):
            await trio.lowlevel.checkpoint()
            return
        if delivery.handle not in self._values:
            await trio.lowlevel.checkpoint()
            return
        digest = self._add_runs(delivery.handle, 1)
        try:
            await self._client.execute("HSET", self._attempts, digest, self._totals[digest])
        except RedisError as exc:
            assert self._host is not None
            self._host.report_fault("attempts", f"a run could not be counted yet: {exc}")
            return
        self._in_ledger.add(digest)
        self._changed.pop(digest, None)

    def _finish(self, token: int) -> None:
        """``token``'s handler finished and it is acknowledged (or dropped) in the window, its
        removal not sent yet: its runs leave its value's count now, and the journal notes it
        finished, so a successor on this host removes it rather than run it again."""
        if self._journal is None or token in self._finished:
            return
        digest = self._digests.get(token)
        if digest is None:
            digest = self._digests[token] = hashlib.sha1(self._values[token]).hexdigest()
        runs = self._runs.pop(token, 0)
        if runs:
            self._add_total(digest, -runs)
        self._done[digest] += 1
        self._finished[token] = self._journal.record(_DONE + digest, self._done[digest])

    def _unfinish(self, token: int) -> str | None:
        """``token`` is no longer finished-and-waiting (removed, or let go): the journal's
        note goes. Returns its digest if it was."""
        if token not in self._finished:
            return None
        del self._finished[token]
        digest = self._digests[token]
        self._done[digest] -= 1
        assert self._journal is not None
        self._journal.record(_DONE + digest, self._done[digest])
        if self._done[digest] <= 0:
            del self._done[digest]
        return digest

    def _add_total(self, digest: str, change: int) -> int:
        total = self._totals.get(digest, 0) + change
        if total > 0:
            self._totals[digest] = total
        else:
            self._totals.pop(digest, None)
        if self._journal is not None:
            self._changed[digest] = self._journal.record(digest, max(0, total))
        return total

    def _uncount(self, token: int) -> list[tuple[str, str, str, int] | tuple[str, str, str]]:
        """``token``'s entry left the processing list: its runs leave its value's count.
        Returns what the ledger needs for it (nothing unless Redis has the value's field)."""
        runs = self._runs.pop(token, 0)
        finished = self._unfinish(token)
        digest = self._digests.pop(token, None)
        if digest is None or not (runs or finished):
            return []
        total = self._add_total(digest, -runs) if runs else self._totals.get(digest, 0)
        if digest not in self._in_ledger:
            return []
        self._changed.pop(digest, None)
        if total > 0:
            return [("HSET", self._attempts, digest, total)]
        self._in_ledger.discard(digest)
        return [("HDEL", self._attempts, digest)]

    async def _ship_loop(self) -> None:
        """Every :data:`~.attempts.SHIP_EVERY`, send the counts that changed before the last
        pass (under the flush lock, so it never overtakes a settle's own change)."""
        while True:
            await trio.sleep(SHIP_EVERY)
            async with self._flush_lock:
                await self._ship()

    async def _ship(self, *, everything: bool = False) -> None:
        journal = self._journal
        covered = self._covered
        self._covered = journal.last if journal is not None else 0
        if everything:
            covered = self._covered
        if self._finished:  # a finished entry's note must stay readable until it is removed
            covered = min(covered, min(self._finished.values()) - 1)
        due = [d for d, number in self._changed.items() if number <= covered]
        if due:
            pipeline = self._client.pipeline()
            for digest in due:
                total = self._totals.get(digest, 0)
                if total > 0:
                    pipeline.add("HSET", self._attempts, digest, total)
                else:
                    pipeline.add("HDEL", self._attempts, digest)
            try:
                await pipeline.execute(raise_on_error=True)
            except RedisError as exc:
                assert self._host is not None
                self._host.report_fault("attempts", f"sending {len(due)} run counts: {exc}")
                return
            for digest in due:
                if self._changed.get(digest, covered + 1) <= covered:
                    del self._changed[digest]
                if self._totals.get(digest, 0) > 0:
                    self._in_ledger.add(digest)
                else:
                    self._in_ledger.discard(digest)
        assert self._host is not None
        self._host.clear_fault("attempts")
        if journal is not None:
            journal.mark_sent(covered)

    def _forget_journal(self, consumer: str) -> None:
        """Remove a reaped consumer's journal on this host (its runs are in the entries now)."""
        try:
            RunJournal.path_of(self._journal_group(), consumer).unlink()
        except OSError:
            pass

    async def _adopt(self, consumer: str) -> list[Any]:
        """What ``consumer``'s journal on this host recorded and had not sent (it died: this
        consumer reaps it, or restarts under its name): the run counts go to its ledger (the
        journal is its own, so what it says is the count), and the copies its handlers had
        finished are returned, as the reaper's and take-back's pairs of SHA-1 and count."""
        path = RunJournal.path_of(self._journal_group(), consumer)
        unsent = await trio.to_thread.run_sync(RunJournal.read_unsent, path)
        done: list[Any] = []
        ledger = attempts_key(self._key, consumer)
        pipeline = self._client.pipeline()
        for key, count in unsent.items():
            if key.startswith(_DONE):
                if count > 0:
                    done += (key[len(_DONE) :], count)
            elif count > 0:
                pipeline.add("HSET", ledger, key, count)
            else:
                pipeline.add("HDEL", ledger, key)
        if len(pipeline):
            await pipeline.execute(raise_on_error=True)
        return done

    def _release(self, token: int, *, removed: bool) -> None:
        """``token`` is no longer held (``removed``: its entry left the processing list; else
        it stays there, to be taken back, with the runs it had)."""
        if removed:
            self._ledger_commands += self._uncount(token)
        else:
            self._unfinish(token)  # a finished one that stays is handled again
            runs = self._runs.pop(token, 0)
            self._digests.pop(token, None)
            value = self._values.get(token)
            if value is not None and runs:
                self._let_go_runs[value] += runs  # its value's count keeps them
        self._suspects.discard(token)
        value = self._values.pop(token, None)
        if value is None:
            return
        held = self._held
        held[value] -= 1
        if held[value] <= 0:
            del held[value]
        if removed and self._removed_during is not None:
            self._removed_during[value] += 1

    async def _send_ledger(self) -> None:
        """Send what removals changed in the ledger (only values whose count Redis has);
        a failure leaves them to the ship loop."""
        commands, self._ledger_commands = self._ledger_commands, []
        if not commands:
            await trio.lowlevel.checkpoint()
            return
        pipeline = self._client.pipeline()
        for command in commands:
            pipeline.add(*command)
        try:
            await pipeline.execute(raise_on_error=True)
        except RedisError:
            for command in commands:  # the ship loop sends the count as it is then
                digest = command[2]
                self._changed[digest] = 0
                self._in_ledger.add(digest)

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
        token: int = delivery.handle
        kind = outcome.kind
        if kind is OutcomeKind.ACK or kind is OutcomeKind.DROP:
            if not self._windowed:  # no segment to lose: a successor may remove it
                self._finish(token)
            if self._window.consumed(token, keep=kind is OutcomeKind.ACK):
                return await self._flush()
            return False  # held for the read's flush
        value = self._values[token]
        copy = self.retry_copy(delivery)
        with self._settling(token, "retry"):
            if kind is OutcomeKind.RETRY_AFTER:
                await self.schedule(copy, outcome.delay, self.processing, value)
            else:
                await self._copy_then_remove(self.push_copy(copy), value)
        await self._send_ledger()
        return True

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        token: int = delivery.handle
        value = self._values[token]
        write = self.dead_letter_command(delivery, letter)
        with self._settling(token, f"dead letter to {letter.destination!r}"):
            if self._same_slot(letter.destination):
                await self._copy_then_remove(write, value)
            else:  # two slots: the letter first, so a crash between never loses it
                await self._client.execute(*write)
                await self._client.execute("LREM", self.processing, 1, value)
        await self._send_ledger()
        return True

    async def _copy_then_remove(self, write: Command, value: bytes) -> None:
        """Run ``write`` and then the ``LREM`` of ``value``, as one script: a write that fails
        leaves the original in the processing list (:data:`~.list_scripts.COPY_THEN_REMOVE`)."""
        command, key, *args = write
        await self._client.execute(
            "EVAL", COPY_THEN_REMOVE, 2, key, self.processing, value, command, *args
        )

    @contextmanager
    def _settling(self, token: int, what: str) -> Iterator[None]:
        """Around a settle that writes: a Redis error is a fault (the entry stays in the
        processing list, delivered again), and either way the delivery is no longer held."""
        removed = False
        try:
            yield
            removed = True
        except RedisError as exc:
            self._rescan = True  # the entry is delivered again from the processing list
            raise SourceFault(
                "settle",
                f"{what} of an entry of list {self._key!r} failed (it stays in processing list "
                f"{self.processing!r}): {exc}",
                left=f"the entries stayed in processing list {self.processing!r}",
            ) from exc
        finally:
            self._release(token, removed=removed)
            if self._window.settled_alone(token):
                self._flush_wanted.set()

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        del why  # whatever the reason, the entry stays in the processing list
        token: int = delivery.handle
        self._release(token, removed=False)
        if self._window.let_go(token):
            self._flush_wanted.set()  # ``unsettled`` cannot wait: the flush task sends it

    def _settle_commands(self, tokens: Sequence[int]) -> list[Command]:
        processing, values = self.processing, self._values
        return [("LREM", processing, "1", values[token]) for token in tokens]

    async def _flush(self) -> bool:
        """Send what the window decided (one plan at a time, in commit order); False when
        there was nothing to send. A failure is a :class:`SourceFault`: entries whose ``LREM``
        failed stay in the processing list."""
        async with self._flush_lock:
            plan = self._window.take()
            if plan is None:
                await trio.lowlevel.checkpoint()
                return False
            await self._send(plan)
            return True

    async def _send(self, plan: FlushPlan[int]) -> None:
        # One LREM per entry, each its own command (chunk=1): no MULTI/EXEC around a read.
        items = plan_items(plan, settle=self._settle_commands, chunk=1)
        try:
            replies = await send_items(self._client, items)
        except RedisError as exc:
            # A lost connection is not the entries' doing: the runs whose removal it lost are
            # not charged (docs/guides/outcomes.md, "An attempt is a handler run").
            lost = isinstance(exc, RedisConnectionError | ReadOnlyError)
            for token in plan.tokens:
                if lost and self._runs.get(token, 0) > 0:
                    self._add_runs(token, -1)
                self._release(token, removed=False)
            self._rescan = True  # the reader takes them back from the processing list
            raise SourceFault(
                "flush",
                f"flush of {len(plan.tokens)} settles and {len(plan.segments)} segments of list "
                f"{self._key!r} failed (the entries stay in processing list "
                f"{self.processing!r}): {exc}",
            ) from exc
        failures: list[str] = []
        for item, reply in zip(items, replies, strict=True):
            if isinstance(reply, RedisError):
                what = "MULTI/EXEC of a segment" if isinstance(item, list) else str(item[0])
                failures.append(f"{what}: {reply}")
            elif isinstance(item, list) and isinstance(reply, list):
                failures += [
                    f"{command[0]!s} inside MULTI/EXEC: {result}"
                    for command, result in zip(item, reply, strict=False)
                    if isinstance(result, RedisError)
                ]
            elif isinstance(item, tuple) and item[0] == "LREM" and reply == 0:
                self.vanished += 1  # a reaper moved it back meanwhile: it is handled again
        for token in plan.tokens:
            self._release(token, removed=not failures)
        await self._send_ledger()
        if failures:
            self._rescan = True  # what is still in the processing list is delivered again
            raise SourceFault("flush", f"flush of {len(items)} items: {'; '.join(failures)}")

    async def _flush_loop(self) -> None:
        """Send the settles of reads whose last delivery was let go (``unsettled`` cannot
        wait)."""
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

    # ---- heartbeat and reaper ----------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        """Renew the heartbeat every third of its TTL (and stay listed: a reaper that took this
        consumer for dead removed it). Cancelled with the subscription: the heartbeat expires
        by itself unless ``aclose`` removes it first."""
        assert self._host is not None
        while True:
            await trio.sleep(self._ttl_ms / 3000)
            try:
                await self._beat()
            except RedisError as exc:
                message = f"renewing {self._heartbeat!r}: {exc}"
                self._host.report_fault("heartbeat", message, error=exc)
            else:
                self._host.clear_fault("heartbeat")

    async def _reap_loop(self) -> None:
        """Every ``reap_every`` s, move the processing lists of consumers whose heartbeat
        expired back to the list (:meth:`reap`)."""
        assert self._host is not None
        while True:
            await trio.sleep(self._source.reap_every)
            try:
                await self.reap()
            except RedisError as exc:
                self._host.report_fault("reap", f"reaping list {self._key!r}: {exc}", error=exc)
            else:
                self._host.clear_fault("reap")

    async def reap(self) -> int:
        """One reaper pass: returns how many entries it moved back to the list."""
        members = await self._client.execute("SMEMBERS", self._consumers)
        others = sorted(
            name
            for name in (m.decode() if isinstance(m, bytes) else str(m) for m in members)
            if name != self.consumer
        )
        if not others:
            return 0
        # Consumers whose heartbeat is gone died: their runs recorded on this host go to their
        # ledgers first (the reaper's script is still the one that decides).
        pipeline = self._client.pipeline()
        for name in others:
            pipeline.add("EXISTS", heartbeat_key(self._key, name))
        alive = await pipeline.execute(raise_on_error=True)
        dead: dict[str, list[Any]] = {}
        for name, beating in zip(others, alive, strict=True):
            if not beating:
                dead[name] = await self._adopt(name)
        pipeline = self._client.pipeline()
        for name in others:
            pipeline.add(*self._reap_command(name, force=False), *dead.get(name, ()))
        replies = await pipeline.execute(raise_on_error=True)
        moved = 0
        for name, reply in zip(others, replies, strict=True):
            if isinstance(reply, int) and reply >= 0 and name in dead:
                self._forget_journal(name)
            if isinstance(reply, int) and reply > 0:
                moved += reply
                _log.warning(
                    "%s: consumer %r of list %r is gone (its heartbeat expired): moved its %d "
                    "entries back to the list", self._label, name, self._key, reply,
                )  # fmt: skip
        self.reaped += moved
        return moved

    def _reap_command(self, name: str, *, force: bool) -> tuple[Any, ...]:
        return (
            "EVAL", REAP, 5, self._key, processing_key(self._key, name),
            heartbeat_key(self._key, name), self._consumers, attempts_key(self._key, name),
            name, self._end.push_front, "1" if force else "0", REDELIVERED_HEADER, self._token,
        )  # fmt: skip

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
        finally:
            try:
                # What is left was not settled: back to the list now, with the runs it had
                # (a handler the drain gave up on counts), and no heartbeat.
                async with self._flush_lock:
                    await self._ship(everything=True)
                await self._client.execute(*self._reap_command(self.consumer, force=True))
                self._forget_journal(self.consumer)
            except RedisError as exc:
                _log.warning(
                    "%s: could not return processing list %r at close (a reaper will, once "
                    "its heartbeat expires): %s", self._label, self.processing, with_cause(exc),
                )  # fmt: skip
            finally:
                await self._dedicated.drop(None)

    def __repr__(self) -> str:
        return (
            f"<ReliableListSubscription {self._label!r} list={self._key!r} "
            f"consumer={self.consumer!r}>"
        )
