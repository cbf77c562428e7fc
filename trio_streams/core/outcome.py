"""What a handler says became of a delivery: ack(), drop(), retry(), retry_after(seconds).

Outcomes are small immutable values, so tests compare them directly
(``assert outcomes == [ack(), retry_after(60)]``). What each outcome does is the transport's
business (see the settle table in the docs); the core only decides which outcome applies.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import final

__all__ = ["Outcome", "OutcomeKind", "ack", "drop", "retry", "retry_after"]


class OutcomeKind(enum.Enum):
    ACK = "ack"
    DROP = "drop"
    RETRY = "retry"
    RETRY_AFTER = "retry_after"


@final
@dataclass(frozen=True, slots=True)
class Outcome:
    """The settled fate of one delivery. Build it with the module functions, not directly."""

    kind: OutcomeKind
    #: Seconds to wait before the retry; 0 for everything but ``retry_after``.
    delay: float = 0.0

    @property
    def is_retry(self) -> bool:
        return self.kind is OutcomeKind.RETRY or self.kind is OutcomeKind.RETRY_AFTER

    @property
    def consumes(self) -> bool:
        """True when the delivery is finished with (ack or drop) rather than tried again."""
        return self.kind is OutcomeKind.ACK or self.kind is OutcomeKind.DROP

    def __repr__(self) -> str:
        if self.kind is OutcomeKind.RETRY_AFTER:
            return f"retry_after({self.delay:g})"
        return f"{self.kind.value}()"


_ACK = Outcome(OutcomeKind.ACK)
_DROP = Outcome(OutcomeKind.DROP)
_RETRY = Outcome(OutcomeKind.RETRY)


def ack() -> Outcome:
    """The delivery was handled; settle it as done."""
    return _ACK


def drop() -> Outcome:
    """The delivery is unwanted; settle it as done without handling it."""
    return _DROP


def retry() -> Outcome:
    """Deliver this message again as soon as the transport can (counts towards max_attempts)."""
    return _RETRY


def retry_after(seconds: float) -> Outcome:
    """Deliver this message again after ``seconds`` (counts towards max_attempts).

    The delay runs on Trio's clock, so tests with ``autojump_clock`` do not wait for it.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise TypeError(f"retry_after() takes a number of seconds, not {type(seconds).__name__}")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"retry_after() needs a finite delay >= 0, got {seconds!r}")
    if seconds == 0:
        return _RETRY
    return Outcome(OutcomeKind.RETRY_AFTER, float(seconds))
