"""What happens when a handler fails, a payload cannot be decoded, or retries run out.

- An exception from a handler runs the failure policy: retry (after ``retry_delay``) until the
  delivery has been tried ``max_attempts`` times, then dead-letter it if a dead letter is
  configured, else drop it. Every failure is logged with the subscription and the attempt.
- A payload that cannot be decoded runs the decode policy: drop it, logged with the reason, or
  dead-letter it when a dead letter is configured. Retrying cannot fix a payload, so it never
  retries.
- ``max_attempts`` counts deliveries including the first, and caps explicit ``retry()`` and
  ``retry_after()`` outcomes the same way.

Delayed retries on transports that keep no durable schedule are Trio timers owned by the
subscription (``DelayedRetries``); on shutdown they fire at once, before the broker closes.
"""

from __future__ import annotations

import heapq
import itertools
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import trio

from .delivery import Delivery
from .outcome import Outcome, drop, retry, retry_after

__all__ = ["DelayedRetries", "FailurePolicy", "Verdict"]

RetryDelay = float | Callable[[int], float]


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome to settle with, and whether the delivery goes to the dead letter first."""

    outcome: Outcome
    dead_letter: str | None = None


@dataclass(frozen=True, slots=True)
class FailurePolicy:
    max_attempts: int = 3
    dead_letter: str | None = None
    retry_delay: RetryDelay = 0.0

    def __post_init__(self) -> None:
        if isinstance(self.max_attempts, bool) or not isinstance(self.max_attempts, int):
            raise TypeError("max_attempts must be an int")
        if self.max_attempts < 1:
            raise ValueError(
                f"max_attempts counts deliveries including the first; got {self.max_attempts}"
            )
        if not callable(self.retry_delay) and self.retry_delay < 0:
            raise ValueError(f"retry_delay must be >= 0, got {self.retry_delay}")

    def on_exception(self, delivery: Delivery) -> Outcome:
        """The outcome a failed handler call gets (before the attempts cap)."""
        delay = (
            self.retry_delay(delivery.attempt) if callable(self.retry_delay) else self.retry_delay
        )
        return retry_after(delay) if delay > 0 else retry()

    def decide(self, delivery: Delivery, outcome: Outcome) -> Verdict:
        """Apply the attempts cap: a retry of a delivery tried max_attempts times is spent."""
        if outcome.is_retry and delivery.attempt >= self.max_attempts:
            return Verdict(drop(), self.dead_letter)
        return Verdict(outcome)

    def on_undecodable(self) -> Verdict:
        """Decode failures go to the dead letter (when one is set) or are dropped."""
        return Verdict(drop(), self.dead_letter)


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
