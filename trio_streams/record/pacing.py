"""How fast a replay publishes: as fast as it can, at a fixed rate, or as recorded (sped up).

Times come from Trio's clock (``trio.current_time``), so a replay paced as recorded runs under
``autojump_clock`` in a test without waiting for real.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import final

from ..core.errors import ConfigurationError

__all__ = ["Pacing"]


@final
@dataclass(frozen=True, slots=True)
class Pacing:
    """``rate``: messages per second; ``speed``: the recorded gaps divided by it (1.0: as
    recorded). Neither: unpaced. Use the constructors."""

    rate: float | None = None
    speed: float | None = None

    def __post_init__(self) -> None:
        if self.rate is not None and self.speed is not None:
            raise ConfigurationError("a replay is paced by a rate or as recorded, not both")
        for name, value in (("rate", self.rate), ("speed", self.speed)):
            if value is not None and not (math.isfinite(value) and value > 0):
                raise ConfigurationError(f"the {name} must be a positive number, not {value}")

    @classmethod
    def unpaced(cls) -> Pacing:
        return cls()

    @classmethod
    def per_second(cls, rate: float) -> Pacing:
        return cls(rate=rate)

    @classmethod
    def as_recorded(cls, speed: float = 1.0) -> Pacing:
        return cls(speed=speed)

    @property
    def paced(self) -> bool:
        return self.rate is not None or self.speed is not None

    def due(self, index: int, timestamp_ms: int, first_timestamp_ms: int) -> float:
        """Seconds after the replay's start when message ``index`` (0-based) is due."""
        if self.rate is not None:
            return index / self.rate
        if self.speed is not None:
            # A timestamp earlier than the first (clocks of several producers) is due at once.
            return max(0, timestamp_ms - first_timestamp_ms) / 1000 / self.speed
        return 0.0

    def describe(self) -> str:
        if self.rate is not None:
            return f"{self.rate:g} messages/s"
        if self.speed is not None:
            return "as recorded" if self.speed == 1 else f"as recorded, {self.speed:g}x"
        return "unpaced"
