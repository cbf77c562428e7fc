"""A member of a consumer group on a stream file: ``FileStream(...).group("billing")``.

Members in any number of processes on one host share a group's messages: each message is
handed to one member at a time, at-least-once, and a handler run is what an attempt is. The
group's state lives beside the file (:mod:`.group_store`, :mod:`.group_state`); the stream file
itself is only read.

**Claiming.** A member takes ``claim`` messages at once, under the group's lock, in this order:
retries that are due, work handed back (by a member that stopped, or taken from a dead one),
then the next messages of the file. It holds them under a lease it renews while it runs (every
third of ``lease``, at most every second); its handlers' runs and settles go to its run journal
as they happen (no system call), and into the state at its next transaction. It takes more only
when it has fewer than ``claim`` messages in hand, so a fast member never hoards.

**Members that go.** A member whose process is gone (its life lock is free: the kernel dropped
it) loses its claims at the next look of any other member, at most a second later; one that
stops renewing (a frozen process) loses them when its lease ends. Whoever takes its batches
first folds its journal into the state: its runs are charged, what it settled is not handed out
again. A graceful stop hands back at once whatever the member has not settled: what it never
started goes back uncharged, what was cut short in a handler goes back with its run counted.

**Outcomes.** ack and drop settle. ``retry`` keeps the message in the member's hands and runs it
again (no copy is appended: the attempt is its runs plus one); ``retry_after(d)`` moves it into
the state's delayed retries, due ``d`` later, which any member runs then, across restarts. Dead
letters are published (to their key of the same file, or another destination) and the message
dropped, as on every file subscription.

**Order.** Without ``ordered`` there is none across members. With it, a stream key is held by the
member whose batches hold it, and no other member takes that key's messages until they are all
settled: each key is handled in order across the group, keys move only between batches, and
inside the member its lanes are keyed by stream key (a retry is handled again in place).

**Where it starts, where it ends.** A new group starts at the tip (live), the beginning
(``.replay()``) or ``start_at``; an existing one resumes at its state. A replay member ends once
the group has nothing left: nothing new up to the end of the file, nothing handed back, no retry
waiting, and nothing of its own in hand.

**Seeking.** A member's handler may seek only while it is the group's only live member; the
seek moves the whole group (every key's cursor), and what the member held from before is settled
as skipped. ``FileBroker.set_group_position`` moves a group whose members are stopped.

Cancellation: ``read`` loses nothing when cancelled (a claim is one synchronous step under the
lock); a cancelled ``aclose`` leaves the state as it was, and the member's claims go to the
others as a dead member's do.
"""

from __future__ import annotations

import logging
import math
import os
import re
import secrets
import socket
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence

import trio

from ..core.delivery import Delivery, SequenceDelivery, attempt_from_headers
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome, OutcomeKind
from ..core.positions import Position, PositionKind
from ..core.schedule import FairShare
from ..core.transport import SeekRefused, SubscriptionSource, Unsettled
from .envelope import PREFIXES, STORAGE_HEADERS, open_envelope
from .errors import SeekError, StreamFileNotFoundError
from .format import HEADER_SIZE, Message
from .group_state import Batch, Delayed, GroupState, Member
from .group_store import GroupStateError, GroupStore, RunJournal
from .positions import format_position
from .reader import FileReader
from .sources import FileStream
from .watch import FileWatch, watches

__all__ = ["FileGroupSubscription", "seek_key"]

_log = logging.getLogger("trio_streams.file")
_NO_HEADERS: Mapping[str, str] = {}
#: Longest pause between two looks at the group while nothing happens (seconds).
_LOOK_EVERY = 1.0
#: Reads of the file one ordered claim makes at most (keys held by others are stepped over).
_ORDERED_READS = 16
#: Read on to a message this many bytes ahead, rather than start reading again there.
_REWIND_GAP = 1 << 20
_SETTLED = -1


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def seek_key(
    label: str,
    keys: Sequence[str],
    position: Position,
    *,
    streams: str = "the streams",
    reader: str = "this subscription",
) -> str | None:
    """The stream key a seek to ``position`` addresses among ``keys`` (None: the position needs
    none); ``SeekRefused`` where it names none of them, or none where several are read."""
    if position.kind is PositionKind.BEGINNING or position.kind is PositionKind.END:
        return None
    if position.kind is PositionKind.ENTRY:
        raise SeekRefused(
            f"{label}: {position!r} is a Redis entry id; a stream file is addressed "
            "by sequence numbers and instants"
        )
    if position.stream is None:
        if len(keys) > 1:
            raise SeekRefused(f"{label}: {position!r} must name one of {streams} {list(keys)}")
        return keys[0]
    if position.stream not in keys:
        raise SeekRefused(
            f"{label}: {position!r} names a stream {reader} does not read ({list(keys)})"
        )
    return position.stream


class _Held(SequenceDelivery):
    """A message in this member's hands: a delivery that also knows its batch, its runs so
    far, and the attempt its headers give (a retry copy another subscription wrote), less one.
    ``handle`` is its offset in the file."""

    __slots__ = ("base", "batch", "runs")

    base: int
    batch: int
    runs: int


class FileGroupSubscription(SubscriptionSource):
    """One member of a consumer group on a stream file (see the module docstring)."""

    seekable = True
    durable_delay = True
    counts_runs = True
    acks_in_line = True
    hands_back_at_stop = True

    def __init__(self, path: str, stream: FileStream, *, label: str, count: int) -> None:
        assert stream.group_name is not None
        self.path = path
        self._stream = stream
        self._label = label
        self._keys = stream.keys
        self._count = count
        self.read_count = count
        self._claim = stream.claim
        self._half = stream.claim // 2
        self._lease_ms = int(stream.lease * 1000)
        self.live = not stream.replaying
        self._group = stream.group_name
        self._store = GroupStore(path, stream.group_name)
        host = re.sub(r"[^A-Za-z0-9_-]", "_", socket.gethostname())[:60] or "host"
        self.member = f"{host}.{os.getpid()}.{secrets.token_hex(4)}"
        self._journal: RunJournal | None = None
        self._journal_record: Callable[[int, int], bool] = _unjournaled
        self._member_fd = -1
        self._reader: FileReader | None = None
        self._rereader: FileReader | None = None
        self._watch: FileWatch | None = None
        self._bell: FileWatch | None = None
        #: Claimed and not yet handed to the driver, in order.
        self._buffer: deque[_Held] = deque()
        #: Retries this member runs again itself.
        self._again: deque[_Held] = deque()
        #: Every message in this member's hands and not settled, by offset.
        self._held: dict[int, _Held] = {}
        #: Settled since the last transaction: (batch id, offset) (also in the journal).
        self._settled: list[tuple[int, int]] = []
        #: Messages whose last run died with its process: they run alone.
        self._suspects: set[int] = set()
        #: The last claim found nothing new in the file (up to its end, or its end-of-stream).
        self._drained = False
        #: The state as the last transaction left it.
        self._state: GroupState | None = None
        self._busy = False
        self._share = FairShare()
        self._wake = trio.Event()
        self._joined = False
        self._closed = False
        self._waited_for_file = False
        self._seen = (0, 0)
        if stream.replaying and not os.path.exists(path):
            raise StreamFileNotFoundError(
                f"no such stream file to replay ({label}): check the path", path=path
            )
        self.starts = f"member of group {self._group!r}" + (
            ", ordered by stream key" if stream.ordered else ""
        )

    # ---- joining -----------------------------------------------------------------------------

    async def open(self, host: SubscriptionHost) -> None:
        if _created(self.path):
            await self._join()
        host.start_soon(self._keep)

    async def _join(self) -> None:
        """Join the group (making it if it is new), once the file exists."""
        stream = self._stream
        reader = FileReader(self.path, keys=self._keys, on_eos="hold" if self.live else "stop")
        try:
            self._store.create_directory()
            self._member_fd = self._store.take_member_lock(self.member)
            self._journal = RunJournal(self._store.member_path(self.member, ".runs"))
            created = False

            def join(state: GroupState | None) -> GroupState:
                nonlocal created
                if state is None:
                    created = True
                    state = self._new_state(reader)
                self._check_state(state, reader)
                self._reap(state, _now_ms())
                self._register(state)
                return state

            await self._transact(join, first=True)
            if created:
                _log.info("%s: group %r created in %s", self._label, self._group, self.path)
        except BaseException:
            reader.close()
            self._let_go()
            raise
        assert self._journal is not None
        self._journal_record = self._journal.record
        self._reader = reader
        self._rereader = FileReader(self.path, keys=self._keys, on_eos="stop")
        self._watch = watches.acquire(self.path)
        self._bell = watches.acquire(self._store.bell_path)
        self._joined = True
        _ = stream

    def _new_state(self, reader: FileReader) -> GroupState:
        stream = self._stream
        if stream.start_at is not None:
            key = seek_key(self._label, self._keys, stream.start_at)
            try:
                offset = reader.seek(stream.start_at, key=key, shard=stream.start_at.shard)
            except SeekError as exc:
                raise SeekRefused(
                    f"{self._label}: start_at {stream.start_at!r} refused in {self.path}: "
                    f"{exc.reason}"
                ) from exc
        elif stream.replaying or self._waited_for_file:
            # A live member that started before the file existed: everything in the file was
            # written after its start, as a live subscription reads such a file.
            offset = HEADER_SIZE
        else:
            with FileReader(self.path, keys=self._keys, start=Position.end()) as tip:
                offset = tip.offset
        assert stream.group_name is not None
        return GroupState(
            group=stream.group_name,
            file_created_at_ms=reader.header.created_at_ms,
            keys=sorted(self._keys),
            ordered=stream.ordered,
            cursors=dict.fromkeys(sorted(self._keys), offset),
        )

    def _check_state(self, state: GroupState, reader: FileReader) -> None:
        where = self._store.directory
        if state.file_created_at_ms != reader.header.created_at_ms:
            raise GroupStateError(
                f"group {self._group!r} belongs to a stream file created at "
                f"{state.file_created_at_ms} ms, but {self.path} was created at "
                f"{reader.header.created_at_ms} ms",
                path=where,
            )
        size = reader.file_size()
        if sorted(state.cursors) != sorted(state.keys) or not all(
            HEADER_SIZE <= cursor <= size for cursor in state.cursors.values()
        ):
            raise GroupStateError(
                f"group {self._group!r} has cursors {state.cursors} that do not fit keys "
                f"{state.keys} of a file of {size} bytes; it is left as it is",
                path=where,
            )
        if sorted(state.keys) != sorted(self._keys) or state.ordered != self._stream.ordered:
            raise GroupStateError(
                f"{self._label}: group {self._group!r} reads keys {state.keys}"
                f"{' ordered' if state.ordered else ''}; this member reads {sorted(self._keys)}"
                f"{' ordered' if self._stream.ordered else ''}: a group's members read the same "
                "keys the same way (name another group)",
                path=where,
            )

    # ---- transactions ------------------------------------------------------------------------

    async def _transact(
        self, change: Callable[[GroupState | None], GroupState], *, first: bool = False
    ) -> GroupState:
        """Run ``change`` on the state under the group's lock and save what it returns. The
        lock is waited for; the rest is one synchronous step (a cancellation comes before it,
        or not at all)."""
        store = self._store
        await store.lock()
        try:
            return self._locked(change, first=first)
        finally:
            store.unlock()

    def _try_transact(self, change: Callable[[GroupState | None], GroupState]) -> bool:
        """:meth:`_transact` without waiting: False if another process holds the lock."""
        if not self._store.try_lock():
            self._busy = True
            return False
        try:
            self._locked(change)
        finally:
            self._store.unlock()
        return True

    def _locked(
        self, change: Callable[[GroupState | None], GroupState], *, first: bool = False
    ) -> GroupState:
        store = self._store
        state = store.load()
        if state is None and not first:
            raise GroupStateError(
                f"{self._label}: the state of group {self._group!r} was removed while this "
                "member ran",
                path=store.directory,
            )
        if state is not None and not first:
            self._fold_own(state)
        state = change(state)
        store.save(state, sync=first)
        if self._journal is not None and not first:
            self._journal.reset()
        self._state = state
        return state

    def _fold_own(self, state: GroupState) -> None:
        """Put what this member settled and ran since its last transaction into ``state``;
        renew its lease. A member the others took for dead (its lease ran out while it was
        frozen) finds itself gone: what it held is the others' now."""
        me = state.members.get(self.member)
        if me is None:
            if self._joined and self._held:
                _log.warning(
                    "%s: this member's lease ran out; its %d message(s) went to other members",
                    self._label,
                    len(self._held),
                )
            self._forget_all()
            self._register(state)
            return
        me.lease_until_ms = _now_ms() + self._lease_ms
        mine = {batch.id: batch for batch in state.batches if batch.member == self.member}
        settled: dict[int, list[int]] = {}
        for batch_id, offset in self._settled:
            settled.setdefault(batch_id, []).append(offset)
        for batch_id, offsets in settled.items():
            batch = mine.get(batch_id)
            if batch is not None:
                state.settle(batch, offsets)
        self._settled.clear()
        for held in self._held.values():
            if held.runs:
                batch = mine.get(held.batch)
                if batch is not None:
                    state.count_runs(batch, held.handle, held.runs)

    def _register(self, state: GroupState) -> None:
        """Put this member in ``state``, its lease starting now."""
        now = _now_ms()
        state.members[self.member] = Member(
            id=self.member,
            pid=os.getpid(),
            host=socket.gethostname(),
            joined_ms=now,
            lease_until_ms=now + self._lease_ms,
        )

    def _forget_all(self) -> None:
        self._buffer.clear()
        self._again.clear()
        self._held.clear()
        self._settled.clear()
        self._suspects.clear()

    def _reap(self, state: GroupState, now: int) -> bool:
        """Free the batches of members that are gone: their process died (their life lock is
        free) or their lease ran out. Their journals are folded first. True if any went."""
        gone = False
        store = self._store
        for member in list(state.members.values()):
            if member.id == self.member:
                continue
            alive = store.member_alive(member.id)
            if alive and member.lease_until_ms >= now:
                continue
            _fold_journal(state, member.id, RunJournal.read(store.member_path(member.id, ".runs")))
            freed = state.free(member.id)
            gone = True
            _log.warning(
                "%s: member %s of group %r %s; %d message(s) it held go to the others",
                self._label,
                member.id,
                self._group,
                "is gone (its process ended)" if not alive else "stopped renewing its lease",
                sum(batch.left for batch in freed),
            )
            if not alive:
                store.remove_member_files(member.id)
        return gone

    # ---- claiming ----------------------------------------------------------------------------

    def _wants_more(self) -> bool:
        """Whether to claim: when at most half a claim is left in hand, so that each claim
        takes at least half of one (a transaction per message would cost more than the
        messages)."""
        return self._joined and not self._closed and len(self._held) <= self._half

    def _claim_step(self, state: GroupState | None) -> GroupState:
        """Take work for this member (see the module docstring), in the transaction."""
        assert state is not None
        now = _now_ms()
        budget = self._claim - len(self._held)
        if budget <= 0:
            return state
        ordered = state.ordered
        # Keys other live members hold (with ``ordered``): their messages are not this one's.
        others = (
            {k for b in state.batches if b.member not in (None, self.member) for k in b.keys}
            if ordered
            else set()
        )
        # Retries that are due.
        due = sorted(
            (d for d in state.delayed if d.due_ms <= now and d.key not in others),
            key=lambda d: (d.due_ms, d.offset),
        )
        if due:
            taken = due[:budget]
            for delayed in taken:
                state.delayed.remove(delayed)
            taken.sort(key=lambda d: d.offset)
            batch = state.add_batch(
                self.member,
                {d.key for d in taken},
                taken[0].offset,
                taken[-1].offset + 1,
                len(taken),
                offsets=[d.offset for d in taken],
                runs={d.offset: d.runs for d in taken if d.runs},
            )
            budget -= self._take_batch(batch)
        # Work handed back, or taken from a member that is gone.
        for batch in [b for b in state.batches if b.member is None]:
            if budget <= 0:
                break
            if ordered and not others.isdisjoint(batch.keys):
                continue
            batch.member = self.member
            budget -= self._take_batch(batch)
        if budget > 0:
            if ordered:
                # Keys of work handed back and not taken are not free either: it comes first.
                others |= {k for b in state.batches if b.member is None for k in b.keys}
                self._claim_ordered(state, budget, others)
            else:
                self._claim_new(state, budget)
        return state

    def _claim_new(self, state: GroupState, budget: int) -> None:
        reader = self._reader
        assert reader is not None
        cursor = min(state.cursors.values())
        if reader.offset != cursor:
            reader.rewind_to(cursor)
        messages = reader.read_messages(budget)
        end = reader.offset
        self._drained = not messages and (reader.at_eof or reader.eos is not None)
        if end > cursor:
            for key in state.cursors:
                state.cursors[key] = end
        if messages:
            batch = state.add_batch(self.member, self._keys, messages[0][5], end, len(messages))
            self._hold(batch, messages)

    def _claim_ordered(self, state: GroupState, budget: int, others: set[str]) -> None:
        """Take the next messages of keys no other member holds, at most a fair share of the
        keys (with those this member holds already), each key from its own cursor."""
        reader = self._reader
        assert reader is not None
        mine = sorted({key for b in state.batches if b.member == self.member for key in b.keys})
        free = [key for key in state.keys if key not in others and key not in mine]
        share = max(1, math.ceil(len(state.keys) / max(1, len(state.members))))
        free.sort(key=lambda key: state.cursors[key])
        # Keys beyond this member's share are not taken further: once what it holds of them
        # is settled, they are free for the others (a member that joins gets its share).
        chosen = set(mine[:share]) | set(free[: max(0, share - len(mine))])
        if not chosen:
            self._drained = False
            return
        cursors = state.cursors
        start = min(cursors[key] for key in chosen)
        if reader.offset != start:
            reader.rewind_to(start)
        taken: list[Message] = []
        ended = False
        for _ in range(_ORDERED_READS):
            messages = reader.read_messages(budget - len(taken))
            for message in messages:
                key = message[0]
                if key in chosen and message[5] >= cursors[key]:
                    taken.append(message)
            if len(taken) >= budget:
                break
            if not messages:
                ended = reader.at_eof or reader.eos is not None
                break
        end = reader.offset
        for key in chosen:
            if end > cursors[key]:
                cursors[key] = end
        self._drained = ended and not taken
        if taken:
            batch = state.add_batch(
                self.member,
                {message[0] for message in taken},
                taken[0][5],
                end,
                len(taken),
                offsets=[message[5] for message in taken],
            )
            self._hold(batch, taken)

    def _take_batch(self, batch: Batch) -> int:
        """Read again the messages of ``batch`` (handed back, or a dead member's, or due
        retries) that are not settled, and hold them. Returns how many."""
        reader = self._rereader
        assert reader is not None
        done = set(batch.done)
        wanted = None if batch.offsets is None else set(batch.offsets)
        keys = set(batch.keys)
        found: list[Message] = []
        if wanted is not None:
            pending: deque[Message] = deque()
            for offset in sorted(wanted - done):
                if reader.offset > offset or offset - reader.offset > _REWIND_GAP:
                    reader.rewind_to(offset)
                    pending.clear()
                while True:
                    if not pending:
                        pending.extend(reader.read_messages(64))
                        if not pending:
                            break
                    if pending[0][5] < offset:
                        pending.popleft()
                        continue
                    if pending[0][5] == offset:
                        found.append(pending.popleft())
                    break
        else:
            reader.rewind_to(batch.start)
            while reader.offset < batch.end:
                messages = reader.read_messages(self._claim)
                if not messages:
                    break
                for message in messages:
                    if message[5] >= batch.end:
                        break
                    if message[0] in keys and message[5] not in done:
                        found.append(message)
        self._hold(batch, found)
        return len(found)

    def _hold(self, batch: Batch, messages: list[Message]) -> None:
        held = self._held
        runs_of = batch.runs
        batch_id = batch.id
        buffer_append = self._buffer.append
        for key, shard, seq, timestamp_ms, payload, offset in messages:
            headers: Mapping[str, str] = _NO_HEADERS
            if payload.startswith(PREFIXES):
                payload, headers = open_envelope(payload)
                if headers and not STORAGE_HEADERS.isdisjoint(headers):
                    headers = {k: v for k, v in headers.items() if k not in STORAGE_HEADERS}
            base = attempt_from_headers(headers) - 1 if headers else 0
            runs = runs_of.get(offset, 0)
            delivery = _Held(
                key, payload, headers, seq, shard or None, 1 + base + runs, timestamp_ms, offset
            )
            delivery.base = base
            delivery.batch = batch_id
            delivery.runs = runs
            held[offset] = delivery
            buffer_append(delivery)
            if runs:
                self._suspects.add(offset)

    # ---- reading -----------------------------------------------------------------------------

    def poll(self) -> Sequence[Delivery]:
        if not self._joined:
            return ()
        out: list[Delivery] = []
        again, buffer, count = self._again, self._buffer, self._count
        while again and len(out) < count:
            out.append(again.popleft())
        if not buffer and len(out) < count and self._wants_more():
            watch, bell = self._watch, self._bell
            assert watch is not None and bell is not None
            self._seen = (watch.generation, bell.generation)
            self._try_transact(self._claim_step)
        while buffer and len(out) < count:
            out.append(buffer.popleft())
        return out

    def unread(self) -> int:
        return len(self._buffer) + len(self._again)

    async def read(self) -> Sequence[Delivery] | None:
        while True:
            if not self._joined:
                await self._wait_for_file()
            batch = self.poll()
            if batch:
                return batch
            if self._busy:
                # Another process held the lock: wait for it, and claim.
                self._busy = False
                if self._wants_more():
                    await self._transact(self._claim_step)
                    continue
            if self._finished():
                # Look once more, under the lock, for members that died holding work: theirs
                # would be left behind (their lease may not have run out yet).
                await self._transact(self._reap_now)
                if self._finished():
                    return None
                continue
            await self._wait()

    def _finished(self) -> bool:
        """A replay member is done: nothing new, nothing handed back, no retry waiting."""
        if self.live or not self._drained or self._buffer or self._again:
            return False
        state = self._state
        if state is None:
            return True
        return not state.delayed and all(batch.member is not None for batch in state.batches)

    async def _wait(self) -> None:
        """Wait for the file to grow, the bell to ring, a retry of this member, or the next
        due retry: at most a second, so the group is looked at again (members that died, the
        lease) even when nothing is written."""
        watch, bell = self._watch, self._bell
        assert watch is not None and bell is not None
        timeout = _LOOK_EVERY
        state = self._state
        if state is not None and state.delayed:
            due = min(d.due_ms for d in state.delayed) - _now_ms()
            timeout = max(0.0, min(timeout, due / 1000))
        seen_file, seen_bell = self._seen
        wants_more = self._wants_more()
        if wants_more and (watch.generation != seen_file or bell.generation != seen_bell):
            await trio.lowlevel.checkpoint()
            return
        wake = self._wake
        with trio.move_on_after(timeout):
            async with trio.open_nursery() as nursery:

                async def until(wait: Callable[[], object]) -> None:
                    await wait()  # type: ignore[misc]
                    nursery.cancel_scope.cancel()

                if wants_more:  # with enough in hand, what others write or hand back can wait
                    nursery.start_soon(until, lambda: watch.wait_change(seen_file))
                    nursery.start_soon(until, lambda: bell.wait_change(seen_bell))
                nursery.start_soon(until, wake.wait)
        if wake.is_set():
            self._wake = trio.Event()

    async def _wait_for_file(self) -> None:
        self._waited_for_file = True
        delay = 0.001
        while not _created(self.path):
            await trio.sleep(delay)
            delay = min(delay * 2, 1.0)
        await self._join()

    def _reap_now(self, state: GroupState | None) -> GroupState:
        assert state is not None
        self._reap(state, _now_ms())
        return state

    # ---- keeping the lease -------------------------------------------------------------------

    async def _keep(self) -> None:
        """Renew the lease, fold the journal, and free the claims of members that are gone:
        at most every second, and every third of the lease."""
        every = min(_LOOK_EVERY, self._lease_ms / 3000)
        while True:
            await trio.sleep(every)
            if not self._joined or self._closed:
                continue
            reaped = False

            def keep(state: GroupState | None) -> GroupState:
                nonlocal reaped
                assert state is not None
                reaped = self._reap(state, _now_ms())
                return state

            state = await self._transact(keep)
            due = any(d.due_ms <= _now_ms() for d in state.delayed)
            if reaped:
                self._store.ring()
            if reaped or due:
                self._wake.set()

    # ---- runs and settles --------------------------------------------------------------------

    def record_run(self, delivery: Delivery) -> bool:
        held = self._held.get(delivery.handle)
        if held is None:
            return True
        if not self._journal_record(delivery.handle, held.runs + 1):
            return False
        held.runs += 1
        return True

    async def attempt_started(self, delivery: Delivery) -> None:
        # The journal was full: fold it into the state, then record.
        await self._transact(_present)
        self.record_run(delivery)

    def runs_alone(self, delivery: Delivery) -> bool:
        return delivery.handle in self._suspects

    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool | None:
        offset = delivery.handle
        held = self._held.get(offset)
        if held is not delivery:
            await trio.lowlevel.checkpoint()  # no longer this member's (its lease ran out)
            return False
        kind = outcome.kind
        if kind is OutcomeKind.RETRY:
            # Run again by this member (it still holds it): a new delivery of the message.
            again = _Held(
                held.stream,
                held.payload,
                held.headers,
                held.seq,
                held.shard,
                1 + held.base + held.runs,
                held.timestamp_ms,
                offset,
            )
            again.base, again.batch, again.runs = held.base, held.batch, held.runs
            self._held[offset] = again
            self._suspects.discard(offset)
            self._again.append(again)
            self._wake.set()
            await trio.lowlevel.checkpoint()
            return False
        if kind is OutcomeKind.RETRY_AFTER:
            due = _now_ms() + int(outcome.delay * 1000)

            def delay(state: GroupState | None) -> GroupState:
                assert state is not None
                batch = state.batch(held.batch)
                if batch is not None and batch.member == self.member:
                    state.settle(batch, [offset])
                    state.delayed.append(
                        Delayed(offset=offset, key=held.stream, due_ms=due, runs=held.runs)
                    )
                return state

            await self._transact(delay)  # held until it is in the state (its runs with it)
            self._release(offset)
            return True
        if not self.ack_in_line(held):
            await self._transact(_present)  # the journal was full: fold it, then record
            self.ack_in_line(held)
        # Recorded before any checkpoint; then a schedule point now and then, not per message
        # (the core passed a cancel point before settling).
        await self._share.after_progress()
        return False

    def ack_in_line(self, delivery: Delivery) -> bool:
        """Settle an ack (or a drop) at once: a record in the journal, folded into the state
        at the next transaction. False when the journal is full (or the delivery is no longer
        this member's: then nothing is to be done, and ``settle`` says so)."""
        offset = delivery.handle
        held = self._held
        if held.get(offset) is not delivery or not self._journal_record(offset, _SETTLED):
            return False
        self._settled.append((held[offset].batch, offset))
        del held[offset]
        if len(held) == self._half:
            self._wake.set()  # room for another claim: a read waiting for one goes on
        if self._suspects:
            self._suspects.discard(offset)
        return True

    def _release(self, offset: int) -> None:
        held = self._held
        if held.pop(offset, None) is not None and len(held) == self._half:
            self._wake.set()  # room for another claim: a read waiting for one goes on
        self._suspects.discard(offset)

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        if why is Unsettled.ABANDONED:
            return  # still held: handed back at the close
        held = self._held.get(delivery.handle)
        if held is None or held is not delivery:
            return
        # Read before a seek moved the group: settled as skipped.
        journal = self._journal
        assert journal is not None
        journal.record(delivery.handle, _SETTLED)
        self._settled.append((held.batch, delivery.handle))
        self._release(delivery.handle)

    # ---- seeking -----------------------------------------------------------------------------

    async def seek(self, position: Position) -> None:
        if not self._joined or self._closed:
            raise SeekRefused(f"{self._label}: the member has not joined its group yet")
        key = seek_key(self._label, self._keys, position)
        reader = self._rereader
        assert reader is not None
        try:
            offset = reader.seek(position, key=key, shard=position.shard)
        except SeekError as exc:
            raise SeekRefused(
                f"{self._label}: seek to {format_position(position)} in {self.path}"
                f"{'' if key is None else f' (stream {key!r})'} refused: "
                f"{exc.reason.removeprefix('seek refused: ')}"
            ) from exc
        refusal: list[str] = []

        def move(state: GroupState | None) -> GroupState:
            assert state is not None
            now = _now_ms()
            self._reap(state, now)
            others = [m for m in state.members if m != self.member]
            if others:
                refusal.extend(others)
                return state
            for cursor in state.cursors:
                state.cursors[cursor] = offset
            return state

        await self._transact(move)
        if refusal:
            shown = ", ".join(repr(name) for name in sorted(refusal)[:5])
            raise SeekRefused(
                f"{self._label}: group {self._group!r} of {self.path} is shared with live "
                f"members ({shown}{' and more' if len(refusal) > 5 else ''}): a seek moves "
                "the whole group, theirs too; a member may seek only while it is alone (stop "
                "the others, or move the group while all are stopped, with "
                "FileBroker.set_group_position or `trio-streams file group set-position`)"
            )
        # What this member read at the old position and has not handed out is skipped.
        for delivery in list(self._buffer) + list(self._again):
            self.unsettled(delivery, Unsettled.STALE)
        self._buffer.clear()
        self._again.clear()
        self._drained = False
        self._wake.set()

    # ---- closing -----------------------------------------------------------------------------

    def lag(self) -> tuple[str, float] | None:
        state, reader = self._state, self._reader
        if state is None or reader is None or self._closed:
            return None
        return ("bytes", float(max(0, reader.file_size() - state.position())))

    async def aclose(self) -> None:
        """Leave the group: everything this member holds and has not settled goes back to it
        at once (what a handler never started, uncharged; what one was cut short in, with its
        run), and the member's files go."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        try:
            if self._joined:

                def leave(state: GroupState | None) -> GroupState:
                    assert state is not None
                    freed = state.free(self.member)
                    if freed:
                        _log.info(
                            "%s: %d message(s) handed back to group %r",
                            self._label,
                            sum(batch.left for batch in freed),
                            self._group,
                        )
                    return state

                with trio.CancelScope(shield=True), trio.move_on_after(5):
                    await self._transact(leave)
                    self._store.ring()
                    self._store.remove_member_files(self.member)
        finally:
            self._let_go()

    def _let_go(self) -> None:
        self._joined = False
        for reader in (self._reader, self._rereader):
            if reader is not None:
                reader.close()
        self._reader = self._rereader = None
        for watch in (self._watch, self._bell):
            if watch is not None:
                watches.release(watch)
        self._watch = self._bell = None
        if self._journal is not None:
            self._journal_record = _unjournaled
            self._journal.close()
            self._journal = None
        if self._member_fd >= 0:
            fd, self._member_fd = self._member_fd, -1
            os.close(fd)
        self._store.close()

    def __repr__(self) -> str:
        return f"<FileGroupSubscription {self._label!r} group={self._group!r} on {self.path!r}>"


def _created(path: str) -> bool:
    """Whether a writer has created the file at ``path`` (its header is whole)."""
    try:
        return os.stat(path).st_size >= HEADER_SIZE
    except FileNotFoundError:
        return False


def _unjournaled(offset: int, value: int) -> bool:
    raise AssertionError("a run or settle before the member joined its group")


def _present(state: GroupState | None) -> GroupState:
    assert state is not None
    return state


def _fold_journal(state: GroupState, member: str, records: list[tuple[int, int]]) -> None:
    """Put a gone member's journal into ``state``: the runs of what it held, and what it
    settled (so that is not handed out again)."""
    if not records:
        return
    batches = [batch for batch in state.batches if batch.member == member]
    settled: dict[int, list[int]] = {}
    for offset, value in records:
        for batch in batches:
            if _holds(batch, offset):
                if value == _SETTLED:
                    settled.setdefault(batch.id, []).append(offset)
                else:
                    state.count_runs(batch, offset, value)
                break
    for batch in batches:
        offsets = settled.get(batch.id)
        if offsets:
            state.settle(batch, offsets)


def _holds(batch: Batch, offset: int) -> bool:
    if batch.offsets is not None:
        return offset in batch.offsets
    return batch.start <= offset < batch.end
