"""Retries waiting out a ``retry_after`` delay, on Trio's clock, owned by one subscription.

Transports that keep no durable schedule of their own (stream files, in-process) leave delayed
retries to the core: ``DelayedRetries`` holds them in a heap, and one task of the subscription
fires each when due by settling it with ``retry()``. On shutdown they fire at once, before the
broker closes; if the subscription is cancelled instead, each one still waiting is reported to
the source as abandoned.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable

import trio

from .delivery import Delivery

__all__ = ["DelayedRetries"]


class DelayedRetries:
    """Retries waiting out a ``retry_after`` delay on Trio's clock, owned by one subscription.

    One task sleeps until the earliest deadline and fires what is due, so a thousand pending
    retries cost a heap entry each, not a task each. Capacity is bounded: ``schedule`` waits for
    room, which slows the dispatcher instead of growing memory. ``flush`` fires everything at
    once (shutdown: retries are published before the broker closes).
    """

    def __init__(
        self,
        fire: Callable[[Delivery], Awaitable[None]],
        *,
        capacity: int,
        logger: logging.Logger,
        on_change: Callable[[], None] | None = None,
        on_abandoned: Callable[[Delivery], None] | None = None,
    ) -> None:
        self._fire = fire
        self._on_abandoned = on_abandoned
        self._heap: list[tuple[float, int, Delivery]] = []
        self._order = itertools.count()
        self._room = trio.Semaphore(capacity)
        self._changed = trio.lowlevel.ParkingLot()
        self._flushing = False
        self._closed = False
        self._log = logger
        self._on_change = on_change

    def __len__(self) -> int:
        return len(self._heap)

    def next_deadline(self) -> float:
        return self._heap[0][0] if self._heap else float("inf")

    async def schedule(self, delivery: Delivery, delay: float) -> None:
        await self._room.acquire()
        entry = (trio.current_time() + delay, next(self._order), delivery)
        heapq.heappush(self._heap, entry)
        self._changed.unpark_all()
        if self._on_change is not None:
            self._on_change()

    def flush(self) -> None:
        """Fire every pending retry now, and any scheduled from here on without waiting."""
        self._flushing = True
        self._changed.unpark_all()

    def close(self) -> None:
        """Nothing more will be scheduled: fire what is left now, then let ``run`` return."""
        self._closed = True
        self.flush()

    async def run(self) -> None:
        """The timer task: fire each retry when due. Returns once closed and empty.

        Cancelled, it abandons the retries still waiting: each is reported to ``on_abandoned``.
        """
        try:
            await self._run()
        finally:
            heap, self._heap = self._heap, []
            if self._on_abandoned is not None:
                for _, _, delivery in heap:
                    self._on_abandoned(delivery)

    async def _run(self) -> None:
        while True:
            if not self._heap:
                if self._closed:
                    return
                await self._changed.park()
                continue
            deadline = self._heap[0][0]
            if not self._flushing and deadline > trio.current_time():
                with trio.move_on_at(deadline):
                    await self._changed.park()
                continue
            _, _, delivery = heapq.heappop(self._heap)
            try:
                await self._fire(delivery)
            finally:
                self._room.release()
                if self._on_change is not None:
                    self._on_change()
