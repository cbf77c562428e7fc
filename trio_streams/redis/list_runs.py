"""The handler runs of a reliable list consumer's entries: journal, attempt ledger, adoption.

An entry's attempt is 1, plus the tries its retry copy carries, plus the handler runs it had
at consumers that died holding it (or stopped before settling it), which the reaper and the
take-back write into the entry itself (:data:`~.frames.REDELIVERED_HEADER`). Each run is
recorded before it begins: in the consumer's run journal (:mod:`.journal`, shared memory: no
system call), sent to the consumer's attempt ledger (:func:`~.lists.attempts_key`, runs by
the value's SHA-1; equal values share one count) when it is older than
:data:`~.attempts.SHIP_EVERY` and still held. Without a journal each run goes to the ledger,
acknowledged, before it begins.

A finished entry (acknowledged or dropped in the window, its removal not sent yet) is noted in
the journal, so a successor on this host removes it rather than run it again; the reaper and
the take-back first adopt what a dead consumer's journal on this host recorded and had not
sent (:meth:`ListRuns.adopt`).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

import trio

from ..core.delivery import Delivery
from ..core.host import SubscriptionHost
from .attempts import SHIP_EVERY
from .client import RedisClient
from .client.errors import RedisError
from .journal import RunJournal, journal_epoch, journal_group, open_journal
from .lists import attempts_key

__all__ = ["ListRuns"]

#: The journal key of how many copies of a value (its SHA-1 follows) are finished, their
#: removal not sent.
_DONE = "done:"

LedgerCommand = tuple[str, str, str, int] | tuple[str, str, str]


class ListRuns:
    """The run counts of one reliable list consumer (see the module docstring). ``values``
    is the subscription's: the value of each delivery held, by token."""

    def __init__(
        self, client: RedisClient, key: str, consumer: str, values: dict[int, bytes]
    ) -> None:
        self._client = client
        self._key = key
        self._values = values
        self._attempts = attempts_key(key, consumer)
        self.journal: RunJournal | None = None
        self._epoch = ""
        #: The subscription's host, given first thing at open (faults are reported to it).
        self.host: SubscriptionHost | None = None
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
        self.let_go_runs: Counter[bytes] = Counter()
        #: Ledger commands removals made, sent after the settle that removed them.
        self._ledger_commands: list[LedgerCommand] = []
        #: Tokens finished in the window (acknowledged or dropped, removal not sent), and how
        #: many of each value's copies are.
        self._finished: dict[int, int] = {}
        self._done: Counter[str] = Counter()
        #: Tokens of entries that came back with runs (they run alone).
        self.suspects: set[int] = set()
        self._covered = 0

    async def open_journal(self, consumer: str, *, label: str) -> None:
        """Open the consumer's journal (none, with a warning, where it cannot be made)."""
        self._epoch = await journal_epoch(self._client, self._key)
        self.journal = await open_journal(self.journal_group(), consumer, label=label)

    def journal_group(self) -> str:
        return journal_group(self._client, "list", self._key, self._epoch)

    # ---- deliveries --------------------------------------------------------------------------

    def taken_back(self, token: int, value: bytes) -> int:
        """``token`` is a value taken back from the processing list after this process let an
        equal one go with runs: it carries them. Returns them (the delivery's attempt grows
        by them)."""
        runs = self.let_go_runs.pop(value)
        self._runs[token] = runs
        self._digests[token] = hashlib.sha1(value).hexdigest()
        return runs

    def took_back_own(self) -> None:
        """The first take-back since open charged what a predecessor recorded: the journal
        has sent it all."""
        if self.journal is not None:
            self.journal.mark_sent(self.journal.last)
            self._covered = self.journal.last

    def release(self, token: int, *, removed: bool) -> None:
        """``token`` is no longer held (``removed``: its entry left the processing list, its
        ledger change goes with :meth:`send_ledger`; else it stays there, to be taken back,
        with the runs it had)."""
        if removed:
            self._ledger_commands += self._uncount(token)
        else:
            self._unfinish(token)  # a finished one that stays is handled again
            runs = self._runs.pop(token, 0)
            self._digests.pop(token, None)
            value = self._values.get(token)
            if value is not None and runs:
                self.let_go_runs[value] += runs  # its value's count keeps them
        self.suspects.discard(token)

    def uncharge(self, token: int) -> None:
        """``token``'s settle was lost with its connection: its last run is not charged."""
        if self._runs.get(token, 0) > 0:
            self._add_runs(token, -1)

    # ---- runs --------------------------------------------------------------------------------

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
        return delivery.handle in self.suspects

    def record_run(self, delivery: Delivery) -> bool:
        """Record the run in the journal (the hot path); False without a journal."""
        if self.journal is None or delivery.handle not in self._values:
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
            assert self.host is not None
            self.host.report_fault("attempts", f"a run could not be counted yet: {exc}")
            return
        self._in_ledger.add(digest)
        self._changed.pop(digest, None)

    def finish(self, delivery: Delivery) -> None:
        """The delivery's handler finished and it is acknowledged (or dropped) in the window,
        its removal not sent yet: its runs leave its value's count now, and the journal notes
        it finished, so a successor on this host removes it rather than run it again."""
        token: int = delivery.handle
        if self.journal is None or token in self._finished:
            return
        digest = self._digests.get(token)
        if digest is None:
            digest = self._digests[token] = hashlib.sha1(self._values[token]).hexdigest()
        runs = self._runs.pop(token, 0)
        if runs:
            self._add_total(digest, -runs)
        self._done[digest] += 1
        self._finished[token] = self.journal.record(_DONE + digest, self._done[digest])

    def _unfinish(self, token: int) -> str | None:
        """``token`` is no longer finished-and-waiting (removed, or let go): the journal's
        note goes. Returns its digest if it was."""
        if token not in self._finished:
            return None
        del self._finished[token]
        digest = self._digests[token]
        self._done[digest] -= 1
        assert self.journal is not None
        self.journal.record(_DONE + digest, self._done[digest])
        if self._done[digest] <= 0:
            del self._done[digest]
        return digest

    def _add_total(self, digest: str, change: int) -> int:
        total = self._totals.get(digest, 0) + change
        if total > 0:
            self._totals[digest] = total
        else:
            self._totals.pop(digest, None)
        if self.journal is not None:
            self._changed[digest] = self.journal.record(digest, max(0, total))
        return total

    def _uncount(self, token: int) -> list[LedgerCommand]:
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

    # ---- the ledger in Redis -----------------------------------------------------------------

    async def send_ledger(self) -> None:
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

    async def ship_loop(self, lock: trio.Lock) -> None:
        """Every :data:`~.attempts.SHIP_EVERY`, send the counts that changed before the last
        pass (under the flush lock, so it never overtakes a settle's own change)."""
        while True:
            await trio.sleep(SHIP_EVERY)
            async with lock:
                await self.ship()

    async def ship(self, *, everything: bool = False) -> None:
        """Send the counts whose change the journal recorded before the last pass (all of
        them: ``everything``); a failure is the fault ``attempts``, tried at the next pass."""
        journal = self.journal
        covered = self._covered
        self._covered = journal.last if journal is not None else 0
        if everything:
            covered = self._covered
        if self._finished:  # a finished entry's note must stay readable until it is removed
            covered = min(covered, min(self._finished.values()) - 1)
        due = [d for d, number in self._changed.items() if number <= covered]
        assert self.host is not None
        if due and not await self._send_counts(due, covered):
            return
        self.host.clear_fault("attempts")
        if journal is not None:
            journal.mark_sent(covered)

    async def _send_counts(self, due: list[str], covered: int) -> bool:
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
            assert self.host is not None
            self.host.report_fault("attempts", f"sending {len(due)} run counts: {exc}")
            return False
        for digest in due:
            if self._changed.get(digest, covered + 1) <= covered:
                del self._changed[digest]
            if self._totals.get(digest, 0) > 0:
                self._in_ledger.add(digest)
            else:
                self._in_ledger.discard(digest)
        return True

    # ---- other consumers' journals -----------------------------------------------------------

    def forget_journal(self, consumer: str) -> None:
        """Remove a reaped consumer's journal on this host (its runs are in the entries now)."""
        try:
            RunJournal.path_of(self.journal_group(), consumer).unlink()
        except OSError:
            pass

    async def adopt(self, consumer: str) -> list[Any]:
        """What ``consumer``'s journal on this host recorded and had not sent (it died: this
        consumer reaps it, or restarts under its name): the run counts go to its ledger (the
        journal is its own, so what it says is the count), and the copies its handlers had
        finished are returned, as the reaper's and take-back's pairs of SHA-1 and count."""
        path = RunJournal.path_of(self.journal_group(), consumer)
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
