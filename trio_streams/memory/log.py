"""The in-process log: per-stream sequences from 1, a global publish order, and cursors.

Every stream keeps its messages (up to ``max_len`` per stream, oldest trimmed first) so replays
and seeks work as on a stream file. Subscriptions do not queue messages of their own: each holds
a cursor into the log, so a slow subscriber costs nothing but its position (back-pressure comes
from its bounded delivery channel, not from a growing queue).
"""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sized
from typing import TYPE_CHECKING

from trio.lowlevel import ParkingLot

from ..core.errors import WrongKeyType
from ..core.pipeline import Segment
from ..core.positions import Position, PositionKind
from ..core.transport import SeekRefused

if TYPE_CHECKING:
    from .queues import WorkQueue

__all__ = ["Cursor", "Entry", "Group", "MemoryHub", "StreamLog"]


class Entry:
    """One published message."""

    __slots__ = ("headers", "order", "payload", "seq", "stream", "timestamp_ms")

    def __init__(
        self,
        stream: str,
        seq: int,
        order: int,
        timestamp_ms: int,
        payload: bytes,
        headers: Mapping[str, str],
    ) -> None:
        self.stream = stream
        self.seq = seq
        self.order = order
        self.timestamp_ms = timestamp_ms
        self.payload = payload
        self.headers = headers


class StreamLog:
    """The retained messages of one stream; sequence numbers are contiguous from 1."""

    def __init__(self, name: str, max_len: int) -> None:
        self.name = name
        self.max_len = max_len
        self._entries: list[Entry] = []
        #: Sequence number of ``_entries[0]``.
        self.first_seq = 1
        #: The sequence number the next message will get.
        self.next_seq = 1

    def __len__(self) -> int:
        return len(self._entries)

    def append(self, entry: Entry) -> None:
        self._entries.append(entry)
        self.next_seq = entry.seq + 1
        excess = len(self._entries) - self.max_len
        # Trim in chunks so appending stays amortised O(1).
        if excess > max(64, self.max_len // 4):
            del self._entries[:excess]
            self.first_seq += excess

    def slice(self, start_seq: int, stop_seq: int) -> list[Entry]:
        return self._entries[start_seq - self.first_seq : stop_seq - self.first_seq]

    def get(self, seq: int) -> Entry:
        return self._entries[seq - self.first_seq]

    def seq_after_timestamp(self, timestamp_ms: int) -> int | None:
        """The first retained sequence with a timestamp strictly later, or None."""
        i = bisect.bisect_right(self._entries, timestamp_ms, key=lambda e: e.timestamp_ms)
        return self.first_seq + i if i < len(self._entries) else None

    def seq_at_order(self, order: int) -> int:
        """The first retained sequence published at or after global ``order`` (or next_seq)."""
        i = bisect.bisect_left(self._entries, order, key=lambda e: e.order)
        return self.first_seq + i


def _wrong(name: str, holds: str, wanted: str) -> str:
    return (
        f"key {name!r} holds {holds}, not {wanted} (lists and streams share one key space, "
        "as in Redis); use another key"
    )


class MemoryHub:
    """All the in-process streams of one broker, and who waits on them."""

    def __init__(self, *, max_len: int = 100_000) -> None:
        if max_len < 1:
            raise ValueError(f"max_len must be >= 1, got {max_len}")
        self.max_len = max_len
        self._logs: dict[str, StreamLog] = {}
        self._groups: dict[tuple[tuple[str, ...], str], Group] = {}
        self._order = 0
        self._last_timestamp_ms = 0
        #: Readers waiting for a publish (or a redelivery) park here.
        self.activity = ParkingLot()
        self._listeners: list[Callable[[], None]] = []
        #: Subscriptions open on each stream now (what a request's timeout can say of it).
        self.readers: Counter[str] = Counter()
        #: Pipeline-window segments decided in-process (``pipeline=True``), oldest first; the
        #: last ``max_len`` are kept.
        self.segments: deque[Segment] = deque(maxlen=max_len)
        #: In-process Pub/Sub (:mod:`.channels`): a bus per kind of channel, made at first use,
        #: apart from the streams (a channel and a stream of the same name never meet).
        self.buses: dict[str, object] = {}
        #: In-process work queues (the in-process form of Redis lists), by name. A name holds
        #: a list or a stream, not both (:meth:`check_key`).
        self.queues: dict[str, WorkQueue] = {}

    def log(self, stream: str) -> StreamLog:
        log = self._logs.get(stream)
        if log is None:
            log = self._logs[stream] = StreamLog(stream, self.max_len)
        return log

    def streams(self) -> list[str]:
        return sorted(self._logs)

    def check_key(self, name: str, kind: str) -> None:
        """Refuse, with :class:`~trio_streams.core.errors.WrongKeyType`, using ``name`` as a
        ``kind`` (``"list"`` or ``"stream"``) while it holds the other: under ``app.test()`` a
        Redis broker's lists and streams share one key space, as in Redis (an empty list does
        not exist there, nor here)."""
        if kind == "list":
            log = self._logs.get(name)
            if log is not None and log.next_seq > 1:
                raise WrongKeyType(_wrong(name, "a stream", "a list"))
        else:
            queue = self.queues.get(name)
            if queue is not None and len(queue):
                raise WrongKeyType(_wrong(name, "a list", "a stream"))

    def append(self, stream: str, payload: bytes, headers: Mapping[str, str]) -> Entry:
        log = self.log(stream)
        # Timestamps never go backwards, so a timestamp seek can bisect.
        now = max(time.time_ns() // 1_000_000, self._last_timestamp_ms)
        self._last_timestamp_ms = now
        self._order += 1
        entry = Entry(stream, log.next_seq, self._order, now, payload, headers)
        log.append(entry)
        self.wake()
        return entry

    def next_order(self) -> int:
        return self._order + 1

    def group(self, streams: tuple[str, ...], name: str, start: Position | None) -> Group:
        key = (streams, name)
        group = self._groups.get(key)
        if group is None:
            group = self._groups[key] = Group(Cursor(self, streams, start))
        return group

    def find_group(self, streams: tuple[str, ...], name: str) -> Group | None:
        """The group ``name`` of ``streams`` if one was made (a member opened), else None."""
        return self._groups.get((streams, name))

    def group_names(self, streams: tuple[str, ...]) -> list[str]:
        """The names of the groups made on ``streams``, sorted."""
        return sorted(name for keys, name in self._groups if keys == streams)

    def wake(self) -> None:
        """Wake readers and anyone watching for changes (the test harness)."""
        if self.activity:
            self.activity.unpark_all()
        for listener in self._listeners:
            listener()

    def add_listener(self, listener: Callable[[], None]) -> None:
        self._listeners.append(listener)


class Group:
    """A consumer group: one cursor shared by its members, so each message goes to one.

    As a Redis group's pending list does, it keeps what its members held when they went away:
    entries a member still held at its close or when it was killed (``t.kill_consumer``) are
    delivered again, to any member, before the cursor's next; and it counts each entry's
    handler runs (``runs``), so a delivery's attempt is its runs, never its reads."""

    def __init__(self, cursor: Cursor) -> None:
        self.cursor = cursor
        #: Entries handed back by members (killed, or closed holding them), oldest first.
        self.returned: deque[Entry] = deque()
        #: Handler runs of entries not settled yet, by ``(stream, seq)``.
        self.runs: dict[tuple[str, int], int] = {}
        #: The open members, by ``id``: each one's name and what it holds (read, unsettled).
        self.members: dict[int, tuple[str, Sized]] = {}

    def join(self, member: object, name: str, holds: Sized) -> None:
        """``member`` opened as ``name``; ``holds`` is what it holds (its pending entries)."""
        self.members[id(member)] = (name, holds)

    def leave(self, member: object) -> None:
        """``member`` closed."""
        self.members.pop(id(member), None)

    def others(self, member: object) -> list[str]:
        """The names of the open members other than ``member``."""
        return [name for key, (name, _) in self.members.items() if key != id(member)]

    @property
    def names(self) -> list[str]:
        """The open members' names."""
        return [name for name, _ in self.members.values()]

    @property
    def pending(self) -> int:
        """Entries read and not settled: held by members or handed back to the group."""
        return len(self.returned) + sum(len(holds) for _, holds in self.members.values())


class Cursor:
    """A reading position over one or more streams, in publish order."""

    def __init__(self, hub: MemoryHub, streams: tuple[str, ...], start: Position | None) -> None:
        self._hub = hub
        self._logs = [hub.log(s) for s in streams]
        self._streams = streams
        self._next: list[int] = [log.next_seq for log in self._logs]
        self.move(start if start is not None else Position.end())

    # ---- reading -----------------------------------------------------------------------------

    def available(self) -> int:
        return sum(
            log.next_seq - max(nxt, log.first_seq)
            for log, nxt in zip(self._logs, self._next, strict=True)
        )

    def take(self, limit: int) -> list[Entry]:
        if len(self._logs) == 1:
            log = self._logs[0]
            start = max(self._next[0], log.first_seq)
            stop = min(start + limit, log.next_seq)
            if stop <= start:
                return []
            self._next[0] = stop
            return log.slice(start, stop)
        taken: list[Entry] = []
        while len(taken) < limit:
            best = -1
            best_order = 0
            for i, log in enumerate(self._logs):
                seq = max(self._next[i], log.first_seq)
                if seq < log.next_seq:
                    order = log.get(seq).order
                    if best < 0 or order < best_order:
                        best, best_order = i, order
            if best < 0:
                break
            log = self._logs[best]
            seq = max(self._next[best], log.first_seq)
            taken.append(log.get(seq))
            self._next[best] = seq + 1
        return taken

    @property
    def next_seqs(self) -> list[int]:
        """The sequence number each stream is read from next (in the order of the streams)."""
        return list(self._next)

    # ---- moving ------------------------------------------------------------------------------

    def move_to(self, seq: int) -> None:
        """Read a single stream from sequence ``seq`` next."""
        assert len(self._next) == 1, self._streams
        self._next = [seq]

    def move(self, position: Position) -> None:
        """Move to ``position``; raise SeekRefused, moving nothing, if it is out of reach."""
        kind = position.kind
        if kind is PositionKind.BEGINNING:
            self._next = [log.first_seq for log in self._logs]
            return
        if kind is PositionKind.END:
            self._next = [log.next_seq for log in self._logs]
            return
        if kind is PositionKind.ENTRY:
            raise SeekRefused(
                f"{position!r} is a Redis entry id; in-process streams are addressed by "
                "sequence numbers and instants"
            )
        index = self._stream_index(position)
        log = self._logs[index]
        assert position.value is not None
        if position.shard:
            raise SeekRefused(
                f"{position!r} names shard {position.shard}, but in-process streams have one "
                "shard (0)"
            )
        if kind is PositionKind.SEQUENCE:
            if position.value > log.next_seq:
                raise SeekRefused(
                    f"sequence {position.value} of stream {log.name!r} is past the next one it "
                    f"will write ({log.next_seq})"
                )
            seq = max(position.value, log.first_seq)
        else:
            found = log.seq_after_timestamp(position.value)
            if found is None:
                raise SeekRefused(
                    f"stream {log.name!r} holds no message later than {position.value} ms"
                )
            seq = found
        order = log.get(seq).order if seq < log.next_seq else self._hub.next_order()
        self._next = [
            seq if i == index else other.seq_at_order(order) for i, other in enumerate(self._logs)
        ]

    def _stream_index(self, position: Position) -> int:
        if position.stream is None:
            if len(self._streams) > 1:
                raise SeekRefused(
                    f"{position!r} must name one of the streams {list(self._streams)}"
                )
            return 0
        try:
            return self._streams.index(position.stream)
        except ValueError:
            raise SeekRefused(
                f"{position!r} names a stream this subscription does not read "
                f"({list(self._streams)})"
            ) from None
