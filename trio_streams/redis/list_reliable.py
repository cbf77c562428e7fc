"""A reliable Redis list subscription: a processing list per consumer, heartbeats and a reaper.

How it keeps its promises (one module per job):

- **Nothing lost.** The read (:mod:`.list_reliable_read`) moves entries into this consumer's
  processing list in one round trip (``BLMOVE``, then ``LMOVE``s); an entry stays there until
  its settle removes that exact value (``LREM key 1 value``). At open, after every reconnect
  and after a failed settle, the own processing list is read first: a restart with the same
  ``consumer`` name takes back what it had when it died.
- **An attempt is a handler run.** Each run is recorded before it begins, in the consumer's
  run journal and its attempt ledger (:mod:`.list_runs`); the reaper and the take-back write
  the runs an entry had into the entry itself, so an entry that was only read goes back
  uncharged.
- **Heartbeat and reaper.** The consumer keeps its heartbeat alive (:mod:`.list_heartbeat`);
  every ``reap_every`` s its reaper moves the processing lists of consumers whose heartbeat
  expired back to the front of the list, atomically (:mod:`.list_reaper`).
- **Settles.** ack and drop are collected by the pipeline window (:mod:`.window`, sent by its
  shell, :mod:`.window_shell`) and sent as one ``LREM`` per entry, in one pipeline per read
  (with ``pipeline=True``, after the kept segments; with ``atomic=True`` each segment is a
  ``MULTI``/``EXEC`` holding its entry's ``LREM``). A retry is the copy (with the retry-count
  header) pushed at the back of the list and then the ``LREM``, in one script
  (:data:`~.list_scripts.COPY_THEN_REMOVE`: a push that fails, onto a key turned into another
  type, stops it before the ``LREM``, so the original stays); ``retry_after`` is the copy
  scheduled in the durable delay set and the ``LREM``, in one script (:mod:`.delays`); a dead
  letter is the copy (with the reason headers) and the ``LREM`` in that same script where the
  dead-letter key shares the list's cluster slot, else one after the other (a crash between
  may write the letter twice; a failed write never reaches the ``LREM``).
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

import logging
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
from .client import RedisClient
from .client.errors import RedisError
from .list_base import ListSubscriptionBase
from .list_heartbeat import ListHeartbeat
from .list_reaper import ListReaper
from .list_reliable_read import ListReader
from .list_runs import ListRuns
from .list_scripts import COPY_THEN_REMOVE
from .lists import RedisList, attempts_key, processing_key
from .window import FlushPlan
from .window_shell import WindowShell

__all__ = ["ReliableListSubscription"]

_log = logging.getLogger("trio_streams.redis")


class ReliableListSubscription(ListSubscriptionBase):
    """A consumer of one list with its own processing list; see the module docstring."""

    #: Handler runs are counted (the journal and the attempt ledger).
    counts_runs = True
    #: An ack that leaves its read incomplete joins the read's removals in memory
    #: (:meth:`ack_in_line`); the one that completes it is awaited, as it sends the flush.
    acks_in_line = True

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
        self._attempts = attempts_key(key, consumer)
        self._shell: WindowShell[int] = WindowShell(
            client, self, windowed=window, atomic=atomic, segment_check=segment_check, chunk=1
        )
        self._heartbeat = ListHeartbeat(
            client, key, consumer, heartbeat=source.heartbeat, label=label
        )
        values: dict[int, bytes] = {}
        runs = self._runs = ListRuns(client, key, consumer, values)
        self._reader = ListReader(
            self, self._shell, runs, values, key=key, consumer=consumer, end=self._end,
            processing=self.processing, attempts=self._attempts, count=count,
            block_s=self._block_s, label=label,
        )  # fmt: skip
        #: The value of each delivery held (read, not yet settled or let go), by token.
        self._values = values
        self._reaper = ListReaper(client, source, consumer, self._heartbeat, runs, label=label)
        self._shell.finished = runs.finish
        # The run counts' own methods (:mod:`.list_runs`), one call less per run.
        self.record_run = runs.record_run  # type: ignore[method-assign]
        self.attempt_started = runs.attempt_started  # type: ignore[method-assign]
        self.runs_alone = runs.runs_alone  # type: ignore[method-assign]

    # ---- opening -----------------------------------------------------------------------------

    async def open(self, host: SubscriptionHost) -> None:
        self._runs.host = host  # a close after a failed open still ships what it can
        await super().open(host)
        await self.check_type(self.processing, role="as this consumer's processing list")
        await self.check_type(self._heartbeat.consumers, "set", "as the list's set of consumers")
        await self.check_type(self._attempts, "hash", "as this consumer's attempt ledger")
        # Alive before anything is read: from now on no reaper takes this processing list.
        await self._heartbeat.claim_name()
        await self._runs.open_journal(self.consumer, label=self._label)
        host.start_soon(
            self._runs.ship_loop, self._shell.lock, name=f"{self._label}: attempt ledger"
        )
        host.start_soon(self._heartbeat.run, host, name=f"{self._label}: heartbeat")
        host.start_soon(self._reaper.run, host, name=f"{self._label}: reaper")
        host.start_soon(self._shell.flush_loop, host, name=f"{self._label}: flush")

    # ---- reading and runs --------------------------------------------------------------------

    async def read(self) -> Sequence[Delivery] | None:
        return await self._reader.read()

    async def reap(self) -> int:
        """One reaper pass: returns how many entries it moved back to the list."""
        return await self._reaper.reap()

    def _release(self, token: int, *, removed: bool) -> None:
        """``token`` is no longer held (``removed``: its entry left the processing list; else
        it stays there, to be taken back, with the runs it had)."""
        self._runs.release(token, removed=removed)
        self._reader.release(token, removed=removed)

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
        if kind is OutcomeKind.ACK or kind is OutcomeKind.DROP:
            if self._shell.consumed(delivery, keep=kind is OutcomeKind.ACK):
                return await self._shell.flush()
            return False  # held for the read's flush
        token: int = delivery.handle
        value = self._values[token]
        copy = self.retry_copy(delivery)
        with self._settling(token, "retry"):
            if kind is OutcomeKind.RETRY_AFTER:
                await self.schedule(copy, outcome.delay, self.processing, value)
            else:
                await self._copy_then_remove(self.push_copy(copy), value)
        await self._runs.send_ledger()
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
        await self._runs.send_ledger()
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
            self._reader.rescan = True  # the entry is delivered again from the processing list
            raise SourceFault(
                "settle",
                f"{what} of an entry of list {self._key!r} failed (it stays in processing list "
                f"{self.processing!r}): {exc}",
                left=f"the entries stayed in processing list {self.processing!r}",
            ) from exc
        finally:
            self._release(token, removed=removed)
            self._shell.settled_alone(token)

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        del why  # whatever the reason, the entry stays in the processing list
        token: int = delivery.handle
        self._release(token, removed=False)
        self._shell.let_go(token)

    # ---- the window shell's settler ----------------------------------------------------------

    def settle_commands(self, tokens: Sequence[int]) -> list[Command]:
        # One LREM per entry, each its own command (chunk=1): no MULTI/EXEC around a read.
        processing, values = self.processing, self._values
        return [("LREM", processing, "1", values[token]) for token in tokens]

    def unsent(self, plan: FlushPlan[int], exc: RedisError, *, lost: bool) -> str:
        # A lost connection is not the entries' doing: the runs whose removal it lost are
        # not charged (docs/guides/outcomes.md, "An attempt is a handler run").
        for token in plan.tokens:
            if lost:
                self._runs.uncharge(token)
            self._release(token, removed=False)
        self._reader.rescan = True  # the reader takes them back from the processing list
        return (
            f"flush of {len(plan.tokens)} settles and {len(plan.segments)} segments of list "
            f"{self._key!r} failed (the entries stay in processing list "
            f"{self.processing!r}): {exc}"
        )

    def interrupted(self, plan: FlushPlan[int]) -> None:
        del plan  # left held: the close returns the whole processing list

    async def flushed(self, plan: FlushPlan[int], *, failed: bool) -> None:
        for token in plan.tokens:
            self._release(token, removed=not failed)
        await self._runs.send_ledger()
        if failed:
            self._reader.rescan = True  # what is still in the processing list is delivered again

    # ---- closing -----------------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            await self._shell.stop()
        finally:
            try:
                # What is left was not settled: back to the list now, with the runs it had
                # (a handler the drain gave up on counts), and no heartbeat.
                async with self._shell.lock:
                    await self._runs.ship(everything=True)
                await self._reaper.return_own()
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
