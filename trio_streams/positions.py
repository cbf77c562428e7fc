"""Positions in a replayable stream: beginning, end, a sequence number, or an instant.

One type serves every seekable transport (stream files, in-process), so a handler written
against a stream file seeks the same way when its app runs on in-process transports in tests.
Values are validated when the position is built: an out-of-range value never reaches a client.
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass

from .errors import ConfigurationError

__all__ = ["MAX_SEQUENCE", "MAX_TIMESTAMP_MS", "InvalidPosition", "Position", "PositionKind"]

#: Sequence numbers are unsigned 64-bit on the wire.
MAX_SEQUENCE = 2**64 - 1
#: The latest instant a stream file can hold: 9999-12-31T23:59:59.999Z, in milliseconds.
MAX_TIMESTAMP_MS = 253_402_300_799_999


class InvalidPosition(ConfigurationError):
    """A position was built from a value no stream can hold."""


class PositionKind(enum.Enum):
    BEGINNING = "beginning"
    END = "end"
    SEQUENCE = "sequence"
    TIMESTAMP = "timestamp"


@dataclass(frozen=True, slots=True)
class Position:
    """Where a subscription reads next.

    - ``Position.beginning()``: the first message still held.
    - ``Position.end()``: the tip; only messages written afterwards.
    - ``Position.sequence(n)``: the first message of the stream with sequence >= n. Inclusive, so
      seeking to the position of a delivery delivers that same message again.
    - ``Position.timestamp(ms)``: the first message strictly later than ``ms`` (Unix epoch ms).

    ``stream`` names the stream a sequence or timestamp refers to; it may be left out when the
    subscription reads a single stream.
    """

    kind: PositionKind
    value: int | None = None
    stream: str | None = None

    @classmethod
    def beginning(cls) -> Position:
        return _BEGINNING

    @classmethod
    def end(cls) -> Position:
        return _END

    @classmethod
    def sequence(cls, n: int, *, stream: str | None = None) -> Position:
        return cls(PositionKind.SEQUENCE, _checked_int("sequence", n, 0, MAX_SEQUENCE), stream)

    @classmethod
    def timestamp(cls, ms: int, *, stream: str | None = None) -> Position:
        """The first message strictly later than ``ms`` milliseconds since the Unix epoch."""
        return cls(
            PositionKind.TIMESTAMP, _checked_int("timestamp", ms, 0, MAX_TIMESTAMP_MS), stream
        )

    @classmethod
    def after(cls, instant: _dt.datetime, *, stream: str | None = None) -> Position:
        """The first message strictly later than an aware datetime, which must be whole ms."""
        if instant.tzinfo is None:
            raise InvalidPosition(f"{instant!r} is naive; give a timezone so the instant is exact")
        if instant.microsecond % 1000:
            raise InvalidPosition(
                f"{instant.isoformat()} has sub-millisecond precision, which a stream cannot hold"
            )
        delta = instant - _dt.datetime(1970, 1, 1, tzinfo=_dt.UTC)
        ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
        return cls.timestamp(ms, stream=stream)

    def for_stream(self, stream: str) -> Position:
        """This position, bound to ``stream`` if it does not already name one."""
        if self.stream is not None or self.kind in (PositionKind.BEGINNING, PositionKind.END):
            return self
        return Position(self.kind, self.value, stream)

    def __repr__(self) -> str:
        if self.kind in (PositionKind.BEGINNING, PositionKind.END):
            return f"Position.{self.kind.value}()"
        where = f", stream={self.stream!r}" if self.stream is not None else ""
        return f"Position.{self.kind.value}({self.value}{where})"


def _checked_int(what: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPosition(f"a {what} position takes an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidPosition(f"{what} {value} is outside [{low}, {high}]")
    return value


_BEGINNING = Position(PositionKind.BEGINNING)
_END = Position(PositionKind.END)
