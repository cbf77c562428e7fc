"""Capped exponential backoff with jitter, for reconnect attempts.

Jitter spreads the reconnects of many clients after one server restart; the cap keeps a long
outage from stretching the delay past what an operator expects.
"""

from __future__ import annotations

import random


class Backoff:
    """Delays for successive failed attempts: between half and all of ``min(cap, initial*2**n)``."""

    __slots__ = ("_random", "cap", "failures", "initial")

    def __init__(self, initial: float, cap: float, *, rng: random.Random | None = None) -> None:
        self.initial = initial
        self.cap = cap
        self.failures = 0
        self._random = rng or random.Random()

    def failed(self) -> float:
        """Record a failure; return how long to wait before the next attempt."""
        ceiling = min(self.cap, self.initial * (2 ** min(self.failures, 32)))
        self.failures += 1
        return self._random.uniform(ceiling / 2, ceiling)

    def succeeded(self) -> None:
        """Record a success: the next failure starts from the initial delay again."""
        self.failures = 0
