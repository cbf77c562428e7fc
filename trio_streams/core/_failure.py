"""What happens when a handler fails, a payload cannot be decoded, or retries run out.

- An exception from a handler runs the failure policy: retry (after ``retry_delay``) until the
  delivery has been tried ``max_attempts`` times, then dead-letter it if a dead letter is
  configured, else drop it. Every failure is logged with the subscription and the attempt.
- A payload that cannot be decoded runs the decode policy: drop it, logged with the reason, or
  dead-letter it when a dead letter is configured. Retrying cannot fix a payload, so it never
  retries.
- A return value the handler's publishers cannot encode is dead-lettered (or dropped) at once:
  the handler already ran, and running it again would repeat its effects.
- ``max_attempts`` counts deliveries including the first, and caps explicit ``retry()`` and
  ``retry_after()`` outcomes the same way.

A pure policy: it decides, and does no I/O. Carrying a decision out is the dispatcher's (and the
transport's) job; delayed retries are :mod:`trio_streams.core._delayed`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .delivery import Delivery
from .outcome import Outcome, drop, retry, retry_after

__all__ = ["FailurePolicy", "Verdict"]

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

    def on_unencodable(self) -> Verdict:
        """A handler that ran but returned a value its publishers cannot encode is not run
        again: dead letter (when one is set) or drop, at once."""
        return Verdict(drop(), self.dead_letter)
