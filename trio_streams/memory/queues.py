"""In-process work queues: what a Redis list subscription runs on under ``app.test()``.

A name holds a work queue or an in-process stream, not both, as a Redis key holds one type
(:meth:`~.log.MemoryHub.check_key`: ``WrongKeyType``). Each entry goes to one consumer. The
two forms behave as live:

- **simple** (``reliable=False``): an entry taken is gone from the queue; a consumer that dies
  loses what it held (:meth:`MemoryListSubscription.kill` puts nothing back);
- **reliable**: an entry taken is held by its consumer until settled; a consumer that dies has
  everything it held put back at the front of the queue, as the reaper moves a dead consumer's
  processing list back (:meth:`MemoryListSubscription.kill`, ``TestClient.kill_consumer``),
  and its later settles remove nothing (a retry still pushes its copy, as live). An entry's
  attempt counts the handler runs it had, never its deliveries: one the dead consumer held
  without running goes back with its count as it was.

Outcomes: ack and drop consume; retry pushes a copy with the retry-count header at the back;
``retry_after`` waits on the core's timer, then retries; a dead letter is pushed onto the
in-process queue of the dead-letter name (``dead_letter_kind="list"``) or published to the
in-process stream of that name.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from trio.lowlevel import cancel_shielded_checkpoint, checkpoint, checkpoint_if_cancelled

from ..core.delivery import RETRY_COUNT_HEADER, Delivery, attempt_from_headers, retry_headers
from ..core.description import SourceDescription
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome
from ..core.pipeline import CommandCheck, Pipeline, Segment
from ..core.sources import NamedSource
from ..core.transport import (
    DeadLetter,
    Sharing,
    Source,
    SubscriptionSource,
    Unsettled,
    check_source_args,
)
from .log import MemoryHub
from .sources import SYSTEM

__all__ = ["MemoryList", "MemoryListSubscription", "QueueEntry", "WorkQueue"]


class QueueEntry:
    """One entry of an in-process work queue."""

    __slots__ = ("headers", "payload", "runs")

    def __init__(self, payload: bytes, headers: Mapping[str, str]) -> None:
        self.payload = payload
        self.headers = headers
        #: Handler runs of this entry that did not settle it (their consumer died, or they
        #: were under way at a stop): its next delivery's attempt counts them.
        self.runs = 0


class WorkQueue:
    """One in-process list: entries ready to take, and every entry ever pushed (the last
    ``max_len``, for ``TestClient.published``)."""

    def __init__(self, name: str, max_len: int) -> None:
        self.name = name
        self._ready: deque[QueueEntry] = deque()
        #: Every entry pushed, oldest first (the last ``max_len``).
        self.pushed: deque[QueueEntry] = deque(maxlen=max_len)

    def __len__(self) -> int:
        return len(self._ready)

    def push(self, payload: bytes, headers: Mapping[str, str]) -> int:
        """Add an entry at the back; returns the queue's length (as ``RPUSH`` does)."""
        entry = QueueEntry(payload, headers)
        self._ready.append(entry)
        self.pushed.append(entry)
        return len(self._ready)

    def put_back(self, entries: Sequence[QueueEntry]) -> None:
        """Put ``entries`` back at the front, the first of them next to be taken."""
        self._ready.extendleft(reversed(entries))

    def take(self, limit: int) -> list[QueueEntry]:
        ready = self._ready
        return [ready.popleft() for _ in range(min(limit, len(ready)))]

    def ready(self) -> list[QueueEntry]:
        """The entries waiting to be taken, next first."""
        return list(self._ready)


def queue_of(hub: MemoryHub, name: str) -> WorkQueue:
    """The work queue ``name`` of ``hub`` (created empty at first use)."""
    queue = hub.queues.get(name)
    if queue is None:
        queue = hub.queues[name] = WorkQueue(name, hub.max_len)
    return queue


@dataclass(frozen=True, slots=True, init=False, repr=False)
class MemoryList(NamedSource):
    """An in-process work queue (see the module docstring); the in-process form of
    ``RedisList``."""

    label = "MemoryList"
    shown = (("reliable", False),)

    key: str
    reliable: bool
    dead_letter_to_list: bool

    def __init__(self, key: str, *, reliable: bool = False, dead_letter_to_list: bool = True):
        check_source_args("MemoryList", (key,), None)
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "reliable", reliable)
        object.__setattr__(self, "dead_letter_to_list", dead_letter_to_list)

    @property
    def streams(self) -> tuple[str, ...]:
        return (self.key,)

    def arguments(self) -> dict[str, Any]:
        return {"reliable": self.reliable, "dead_letter_to_list": self.dead_letter_to_list}

    @property
    def sharing(self) -> Sharing:
        return Sharing.LOCAL

    def reads_dead_letter(self, dead_letter: str) -> bool:
        """A dead letter pushed onto this very list comes back; one appended to a stream
        does not."""
        return self.dead_letter_to_list and dead_letter == self.key

    def description(self) -> SourceDescription:
        return SourceDescription(system=SYSTEM)

    def in_process(self) -> Source:
        return self


class MemoryListSubscription(SubscriptionSource):
    """One consumer of an in-process work queue (see the module docstring)."""

    durable_delay = False
    seekable = False
    live = True

    def __init__(
        self,
        hub: MemoryHub,
        source: MemoryList,
        *,
        label: str,
        count: int,
        window: bool = False,
        segment_check: CommandCheck | None = None,
    ) -> None:
        self._hub = hub
        self._queue = queue_of(hub, source.key)
        self._source = source
        self._label = label
        self._count = count
        self.read_count = count
        self._segment_check = segment_check
        #: The segment of each delivery whose handler queued a command (pipeline=True only).
        self._window: dict[int, Pipeline] | None = {} if window else None
        self._tokens = itertools.count(1)
        #: Reliable: what this consumer holds (taken, not settled), by token.
        self._holding: dict[int, QueueEntry] = {}
        #: Held tokens whose entry came back with runs (they run alone).
        self._suspects: set[int] = set()
        self._retry_target: str | None = None
        #: Tokens below this were handed out before the last :meth:`kill`.
        self._dead_below = 0

    async def open(self, host: SubscriptionHost) -> None:
        self._hub.check_key(self._source.key, "list")  # as the live open checks the key's type
        host.retry_target = f"list:{self._source.key}"  # a work queue: any consumer's copy
        self._retry_target = host.retry_target
        await checkpoint()

    def poll(self) -> Sequence[Delivery]:
        return self._take()

    def unread(self) -> int:
        return len(self._queue)

    async def read(self) -> Sequence[Delivery] | None:
        await checkpoint_if_cancelled()
        while True:
            batch = self._take()
            if batch:
                return batch
            await self._hub.activity.park()

    def _take(self) -> list[Delivery]:
        out: list[Delivery] = []
        for entry in self._queue.take(self._count):
            token = next(self._tokens)
            if self._source.reliable:
                self._holding[token] = entry
            headers = entry.headers
            attempt = attempt_from_headers(headers) if RETRY_COUNT_HEADER in headers else 1
            attempt += entry.runs
            if entry.runs and self._source.reliable:
                self._suspects.add(token)
            out.append(
                Delivery(self._source.key, entry.payload, headers, attempt=attempt, handle=token)
            )
        return out

    @property
    def counts_runs(self) -> bool:  # type: ignore[override]
        """A reliable queue counts handler runs, as the live processing list does."""
        return self._source.reliable

    def runs_alone(self, delivery: Delivery) -> bool:
        """An entry that came back with runs: its last run died with its consumer."""
        return delivery.handle in self._suspects

    def record_run(self, delivery: Delivery) -> bool:
        entry = self._holding.get(delivery.handle)
        if entry is not None:
            entry.runs += 1
        return True

    async def attempt_started(self, delivery: Delivery) -> None:
        self.record_run(delivery)
        await checkpoint()

    def kill(self) -> int:
        """This consumer dies: a reliable one's held entries go back to the front of the queue
        (the reaper's move), to be delivered again, each with its attempt as its handler runs
        make it (one a handler never started is not charged, as live); its later settles
        remove nothing. A simple one loses what it holds. Returns how many entries went back."""
        held = list(self._holding.values())
        self._holding.clear()
        # Everything taken so far was the dead process's: its handlers end with it, and what
        # it still had queued is gone with its memory (``died_with_consumer``).
        self._dead_below = next(self._tokens)
        if held:
            self._queue.put_back(held)
            self._hub.wake()
        return len(held)

    #: A consumer dies at :meth:`kill`.
    consumer_can_die = True

    def died_with_consumer(self, delivery: Delivery) -> bool:
        """``delivery`` was taken by a consumer that :meth:`kill` killed since."""
        token: int = delivery.handle
        return token < self._dead_below

    # ---- the window (pipeline=True), as the in-process stream emulates it ---------------------

    def pipeline(self, delivery: Delivery) -> Pipeline | None:
        window = self._window
        if window is None:
            return None
        segment = window.get(delivery.handle)
        if segment is None:
            segment = window[delivery.handle] = Pipeline(self._segment_check)
        return segment

    def deferred(self, delivery: Delivery, outcome: Outcome) -> None:
        if self._window is not None:
            self._decide(delivery, kept=False, decided_by=outcome.kind.value)

    def _decide(self, delivery: Delivery, *, kept: bool, decided_by: str) -> None:
        assert self._window is not None
        segment = self._window.pop(delivery.handle, None)
        if segment is None:
            return
        segment.close(
            f"the window already {'kept' if kept else 'discarded'} this delivery's segment: "
            "a command queued after its handler returned is never sent"
        )
        if len(segment):
            self._hub.segments.append(
                Segment(self._label, delivery.stream, segment.commands, kept, decided_by)
            )

    # ---- settling ----------------------------------------------------------------------------

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        if self._window is not None:
            self._decide(delivery, kept=outcome.kind.value == "ack", decided_by=outcome.kind.value)
        self._holding.pop(delivery.handle, None)
        self._suspects.discard(delivery.handle)
        if not outcome.consumes:
            self._queue.push(delivery.payload, retry_headers(delivery, self._retry_target))
            self._hub.wake()
        await checkpoint()

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        if not self._source.dead_letter_to_list:
            await checkpoint()
            return False  # the core publishes it to the in-process stream, then drops
        if self._window is not None:
            self._decide(delivery, kept=False, decided_by="dead letter")
        self._holding.pop(delivery.handle, None)
        queue_of(self._hub, letter.destination).push(delivery.payload, letter.headers_for(delivery))
        self._hub.wake()
        await checkpoint()
        return True

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        # As live, a reliable entry stays held (its processing list) until the close below.
        if self._window is not None:
            self._decide(delivery, kept=False, decided_by=why.value)

    async def aclose(self) -> None:
        """A graceful close puts what a reliable consumer still holds back in the queue, as the
        live close moves its processing list back."""
        self.kill()
        await cancel_shielded_checkpoint()
