"""The attempt ledger: handler runs counted durably, so an attempt is a run, never a read.

A Redis pending list counts deliveries: every ``XREADGROUP`` of an entry raises its count,
whether or not a handler ever started on it (a read-ahead buffer, a read whose reply a stop
cut short, the re-read of the own pending list after a restart). Charged as attempts, those
reads drop or dead-letter entries no handler ever ran: a rolling deploy during a backlog does
it in ``max_attempts`` restarts. So a group member counts runs itself:

- **before each handler run** the run is recorded in the consumer's run journal
  (:mod:`.journal`): a few stores into shared memory, durable the instant they are made,
  whatever kills the process next (``kill -9``, a poison message's ``os._exit``);
- **runs reach Redis** in the group's attempt ledger, a hash in the stream's cluster slot with
  one field per entry (its runs): a run older than :data:`SHIP_EVERY` whose entry is still
  held is sent by the ledger's task, and a process that opens under a consumer name reads back
  what its predecessor on this host recorded and had not sent, before it reads its own pending
  entries. An entry acknowledged within that time never costs the ledger a write;
- **when an entry is delivered again** (the own pending list after a restart, entries claimed
  from a dead consumer) the reader reads the fields of what it took, and the delivery's attempt
  is ``1 + runs + the retry count of a retry copy``. The pending list's own delivery count is
  used only as a bound (a run needs a read), never as the count;
- **careful runs.** An entry claimed from another consumer (whose journal is on another host,
  or gone) or taken back with no journal of its predecessor here may have a run Redis does not
  know of yet: each of its runs is written to the ledger, and acknowledged by the server, before
  the handler starts. A message that crashed its process there is counted from its next run on.

What the ledger promises is one-sided: a run is never counted that did not happen; a run goes
uncounted only where its record could not reach Redis — the machine died before the journal's
page was written out, or the consumer's journal is on another host or was lost with its
container, for the run under way at the death — so a message is handled at most once more than
``max_attempts`` says there, and never dropped early. Fields of entries no longer pending (a
crash between an acknowledgement and its field's removal) are swept (:data:`SWEEP`).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import trio

from .client import RedisClient
from .client.errors import RedisError
from .client.scripts import Script
from .companions import companion_key
from .journal import RunJournal

if TYPE_CHECKING:
    from ..core.delivery import Delivery
    from ..core.host import SubscriptionHost
    from ..core.pipeline import Command

__all__ = [
    "SHIP_EVERY",
    "SWEEP",
    "AttemptLedger",
    "ledger_key",
    "runs_of",
]

_log = logging.getLogger("trio_streams.redis")

#: How old a run may be before the ledger's task sends it to Redis, if its entry is still held
#: (s): a run settled sooner costs Redis nothing.
SHIP_EVERY = 0.1

#: Removes the fields of entries that are no longer pending in the group (a crash between an
#: acknowledgement and the removal of its field leaves one). KEYS: ledger, stream. ARGV: group,
#: HSCAN cursor, how many fields to look at. Returns the next cursor.
SWEEP = Script(
    """
local reply = redis.call('HSCAN', KEYS[1], ARGV[2], 'COUNT', tonumber(ARGV[3]))
local fields = reply[2]
for i = 1, #fields, 2 do
  local id = fields[i]
  local ok, pending = pcall(redis.call, 'XPENDING', KEYS[2], ARGV[1], id, id, 1)
  if not ok or #pending == 0 then redis.call('HDEL', KEYS[1], id) end
end
return reply[1]
""",
    purpose="sweep the attempt ledger",
)


#: Raise fields of a ledger to at least the runs given (a count is never lowered). KEYS:
#: ledger. ARGV: entry, runs, entry, runs...
RAISE = Script(
    """
for i = 1, #ARGV, 2 do
  local now = tonumber(redis.call('HGET', KEYS[1], ARGV[i]) or '0') or 0
  if tonumber(ARGV[i + 1]) > now then redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1]) end
end
return 0
""",
    purpose="raise attempt counts",
)


def ledger_key(key: str, group: str) -> str:
    """The attempt ledger of ``group`` on stream (or list) ``key``, in ``key``'s slot."""
    return companion_key(key, f"attempts:{group}")


def runs_of(value: Any) -> int:
    """A ledger field's value as a count of runs (absent, or not a number: none)."""
    if value is None:
        return 0
    try:
        runs = int(value)
    except (TypeError, ValueError):
        return 0
    return max(0, runs)


class AttemptLedger:
    """One group member's runs: the journal, what Redis has, and the careful runs.

    Each delivery carries its counts (:class:`~.deliveries.EntryDelivery`: ``runs``, the runs
    counted so far; ``careful``; once recorded, ``recorded``, its journal record, and once
    sent, ``sent``, the runs Redis has): the hot path stores into the journal and the delivery
    and touches no table. ``held`` gives the deliveries the member holds, for :meth:`ship`.
    """

    def __init__(
        self,
        client: RedisClient,
        ledger: str,
        journal: RunJournal | None,
        host: SubscriptionHost,
        held: Callable[[], Iterable[Delivery]],
        acknowledge: Callable[[list[str]], Awaitable[None]],
        *,
        label: str,
    ) -> None:
        self._client = client
        #: The ledger's key.
        self.key = ledger
        self._journal = journal
        self._host = host
        self._held = held
        self._acknowledge = acknowledge
        self._label = label
        #: Runs of entries let go unsettled (still pending) that Redis may not have: entry ->
        #: runs. Sent at the next pass.
        self._let_go: dict[str, int] = {}
        #: Runs lowered by :meth:`uncharge` and not yet sent: entry -> runs. Until sent, they
        #: override a higher count Redis may still have.
        self._lowered: dict[str, int] = {}
        #: Entries Redis has a field for (sent, careful, or read back with runs).
        self._in_ledger: set[str] = set()
        #: The journal's last record at the last pass: what is older is sent at this one.
        self._covered = journal.last if journal is not None else 0
        self._faulted = False

    # ---- before a run -------------------------------------------------------------------------

    def record_run(self, delivery: Delivery) -> bool:
        """The hot path of ``attempt_started``: record the run in the journal, True; False
        for a careful delivery (or without a journal), which ``attempt_started`` writes."""
        journal = self._journal
        if journal is None or delivery.careful:  # type: ignore[attr-defined]
            return False
        runs = delivery.runs + 1  # type: ignore[attr-defined]
        delivery.runs = runs  # type: ignore[attr-defined]
        delivery.recorded = journal.record(delivery.handle, runs)  # type: ignore[attr-defined]
        return True

    async def attempt_started(self, delivery: Delivery) -> None:
        """A careful run: in the ledger (acknowledged by the server) before it begins. A
        server that does not answer leaves the run uncounted until the next pass sends it (a
        fault meanwhile), never the handler unrun."""
        if self.record_run(delivery):
            await trio.lowlevel.checkpoint()
            return
        runs = delivery.runs + 1  # type: ignore[attr-defined]
        delivery.runs = runs  # type: ignore[attr-defined]
        entry: str = delivery.handle
        delivery.recorded = (  # type: ignore[attr-defined]
            self._journal.record(entry, runs) if self._journal is not None else 0
        )
        try:
            await self._client.execute("HSET", self.key, entry, runs)
        except RedisError as exc:
            self._fault(f"run {runs} of entry {entry} could not be counted yet: {exc}")
            return
        delivery.sent = runs  # type: ignore[attr-defined]
        self._in_ledger.add(entry)
        self._cleared()

    def _fault(self, message: str) -> None:
        self._faulted = True
        self._host.report_fault("attempts", message)

    def _cleared(self) -> None:
        if self._faulted:
            self._faulted = False
            self._host.clear_fault("attempts")

    # ---- reading --------------------------------------------------------------------------

    def known_runs(self, entry: str) -> int:
        """The runs of ``entry``, let go by this process, that Redis may not have (0: none)."""
        return self._let_go.get(entry, 0)

    def counted(self, entry: str, in_redis: int) -> int:
        """The runs to charge ``entry`` delivered again, given what Redis has for it: the
        higher of that and what this process let go, unless a run was uncharged here and Redis
        has not been told yet."""
        lowered = self._lowered.get(entry)
        if lowered is not None:
            return lowered
        return max(in_redis, self._let_go.get(entry, 0))

    def read_back(self, runs: dict[str, int]) -> None:
        """Entries delivered again with the runs the ledger has for them: their fields are
        removed when they are settled."""
        self._in_ledger.update(entry for entry, n in runs.items() if n)

    def let_go(self, delivery: Delivery) -> None:
        """``delivery`` ended unsettled (pending still): its runs are sent at the next pass."""
        runs: int = getattr(delivery, "runs", 0)
        if runs > getattr(delivery, "sent", 0):
            self._let_go[delivery.handle] = runs

    def uncharge(self, delivery: Delivery) -> None:
        """``delivery``'s run ended in a settle that a lost connection kept from the server (its
        flush could not be sent): the entry stays pending and the run is not charged, since it
        is not the message's doing. Its runs, one fewer, are sent at the next pass, lowering a
        count Redis may have. A delivery that did not run here (dropped at ``max_attempts``) is
        only let go. Should the process die first, its journal still holds the run: charged,
        as before, never a run too few."""
        if delivery.runs <= delivery.counted_at_read:  # type: ignore[attr-defined]
            self.let_go(delivery)
            return
        runs = delivery.runs - 1  # type: ignore[attr-defined]
        delivery.runs = runs  # type: ignore[attr-defined]
        self._let_go[delivery.handle] = runs
        self._lowered[delivery.handle] = runs

    # ---- settling -------------------------------------------------------------------------

    def settle_commands(self, entries: Sequence[str]) -> list[Command]:
        """What a flush that acknowledges ``entries`` sends for the ledger (after the
        ``XACK``): the removal of the fields Redis has. Usually nothing."""
        in_ledger = self._in_ledger
        if not in_ledger:
            return []
        gone = [entry for entry in entries if entry in in_ledger]
        return [("HDEL", self.key, *gone)] if gone else []

    def settled(self, entries: Iterable[str]) -> None:
        """``entries`` were acknowledged (their ``XACK`` succeeded): nothing more to send."""
        in_ledger, let_go = self._in_ledger, self._let_go
        if in_ledger or let_go or self._lowered:
            for entry in entries:
                in_ledger.discard(entry)
                let_go.pop(entry, None)
                self._lowered.pop(entry, None)

    async def forget(self, entries: Sequence[str]) -> None:
        """Remove the fields of ``entries``, settled by a step of their own (a retry copy, a
        dead letter): best effort, a field left behind is swept."""
        commands = self.settle_commands(entries)
        self.settled(entries)
        if not commands:
            await trio.lowlevel.checkpoint()
            return
        try:
            await self._client.execute(*commands[0])
        except RedisError as exc:
            _log.debug("%s: attempt ledger: removing %s failed: %s", self._label, entries, exc)

    # ---- sending ----------------------------------------------------------------------------

    async def adopt(self, entries: Iterable[str], peers: list[Path]) -> set[str]:
        """Entries claimed from other consumers: what those consumers' journals on this host
        recorded for them and had not sent goes to Redis first (never lowering a count), so a
        consumer that died on this host has every run it made counted; an entry its handler
        had finished (acknowledged, the acknowledgement not flushed when the process died) is
        acknowledged now instead of being run again. Returns those. Best effort: a failure
        leaves them to their careful runs."""
        wanted = set(entries)
        runs: dict[str, int] = {}
        finished: set[str] = set()
        own = self._journal.path if self._journal is not None else None
        for path in peers:
            if path == own:
                continue
            unsent = await trio.to_thread.run_sync(RunJournal.read_unsent, path)
            for entry, n in unsent.items():
                if entry not in wanted:
                    continue
                if n == 0:
                    finished.add(entry)
                elif n > runs.get(entry, 0):
                    runs[entry] = n
        try:
            if finished:
                await self._acknowledge(sorted(finished))
            fields: list[Any] = []
            for entry, n in runs.items():
                if entry not in finished:
                    fields += (entry, n)
            if fields:
                await self._client.execute("EVAL", RAISE, 1, self.key, *fields)
            else:
                await trio.lowlevel.checkpoint()
        except RedisError as exc:
            _log.debug("%s: attempt ledger: adopting runs failed: %s", self._label, exc)
            return set()
        return finished

    async def recover(self) -> int:
        """At open, before the own pending list is read: send what the journal recorded after
        its last send (a predecessor under this name on this host died before sending it),
        and acknowledge what its handlers had finished but it had not acknowledged. Returns
        how many entries it found."""
        journal = self._journal
        if journal is None or journal.fresh:
            await trio.lowlevel.checkpoint()
            return 0
        since = await trio.to_thread.run_sync(journal.since_sent)
        finished = sorted(entry for entry, runs in since.items() if runs == 0)
        if finished:
            await self._acknowledge(finished)
            await self._client.execute("HDEL", self.key, *finished)
            _log.info(
                "%s: acknowledged %d entries a predecessor had handled but not acknowledged",
                self._label, len(finished),
            )  # fmt: skip
        fields: list[Any] = []
        for entry, runs in since.items():
            if runs:
                fields += (entry, runs)
        if fields:
            await self._client.execute("HSET", self.key, *fields)
            _log.info(
                "%s: %d runs a predecessor recorded and had not sent are in the attempt ledger",
                self._label, len(fields) // 2,
            )  # fmt: skip
        journal.mark_sent(journal.last)
        return len(since)

    def finished(self, delivery: Delivery) -> None:
        """``delivery``'s handler finished and it is acknowledged (or dropped) in the window,
        not yet flushed: a successor on this host acknowledges it rather than run it again."""
        recorded: int = delivery.recorded  # type: ignore[attr-defined]
        journal = self._journal
        if not recorded or journal is None:
            return
        if recorded > journal.sent:  # the common case: the run's own record says so now
            journal.finish(recorded)
            delivery.finished = recorded  # type: ignore[attr-defined]
        else:  # its run was sent already: a record of its own, past the journal's mark
            delivery.finished = journal.record(delivery.handle, 0)  # type: ignore[attr-defined]

    async def run(self, lock: trio.Lock) -> None:
        """Every :data:`SHIP_EVERY`, send the runs older than that whose entries are still
        held or let go (under ``lock``, the member's flush lock, so a removal never overtakes
        them). A task of the subscription; a failure is retried at the next pass."""
        while True:
            await trio.sleep(SHIP_EVERY)
            async with lock:
                await self.ship()

    async def ship(self, *, everything: bool = False) -> None:
        """Send the runs recorded before the last pass (``everything``: all) whose entries are
        still held or let go; then the journal's records up to the last pass are all in Redis,
        or settled."""
        journal = self._journal
        covered = self._covered
        last = journal.last if journal is not None else 0
        self._covered = last
        if everything:
            covered = last
        sending: list[tuple[Delivery, int]] = []
        fields: list[Any] = []
        for delivery in self._held():
            finished: int = delivery.finished  # type: ignore[attr-defined]
            if finished and finished <= covered:
                # Its handler finished, its acknowledgement is not flushed: Redis cannot say
                # so, the journal does. The journal's mark stays before that record, so a
                # successor on this host reads it back and acknowledges the entry.
                covered = finished - 1
            runs: int = delivery.runs  # type: ignore[attr-defined]
            if runs > delivery.sent and delivery.recorded <= covered:  # type: ignore[attr-defined]
                sending.append((delivery, runs))
                fields += (delivery.handle, runs)
        let_go = self._let_go
        for entry, runs in let_go.items():
            fields += (entry, runs)
        if fields:
            try:
                await self._client.execute("HSET", self.key, *fields)
            except RedisError as exc:
                self._fault(f"sending {len(fields) // 2} runs to the attempt ledger: {exc}")
                return
            for delivery, runs in sending:
                delivery.sent = runs  # type: ignore[attr-defined]
            self._in_ledger.update(fields[::2])
            let_go.clear()
            self._lowered.clear()
        self._cleared()
        if journal is not None:
            journal.mark_sent(covered)

    def close(self) -> None:
        if self._journal is not None:
            self._journal.close()
