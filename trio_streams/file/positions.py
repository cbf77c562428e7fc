"""Where a reader can be moved to: the beginning, the tip, a sequence number or an instant."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from .format import MAX_TIMESTAMP_MS, MAX_U64


class PositionKind(enum.StrEnum):
    BEGINNING = "beginning"
    END = "end"
    SEQUENCE = "seq"
    TIMESTAMP = "ts"


@dataclass(frozen=True, slots=True)
class FilePosition:
    """A seek target in a stream file.

    ``sequence(n)`` is inclusive (the first message of the stream with seq ≥ n), so seeking to a
    position read off a message delivers that message again. ``timestamp(ms)`` is exclusive: the
    first message of the stream strictly later than ``ms``. Values outside the format's range are
    refused here, before any reader sees them.
    """

    kind: PositionKind
    value: int = 0

    def __post_init__(self) -> None:
        if self.kind is PositionKind.SEQUENCE and not 0 <= self.value <= MAX_U64:
            raise ValueError(f"sequence number {self.value} outside 0..2**64-1")
        if self.kind is PositionKind.TIMESTAMP and not 0 <= self.value <= MAX_TIMESTAMP_MS:
            raise ValueError(f"timestamp {self.value} ms outside 0..{MAX_TIMESTAMP_MS}")

    @classmethod
    def beginning(cls) -> FilePosition:
        return cls(PositionKind.BEGINNING)

    @classmethod
    def end(cls) -> FilePosition:
        return cls(PositionKind.END)

    @classmethod
    def sequence(cls, seq: int) -> FilePosition:
        return cls(PositionKind.SEQUENCE, seq)

    @classmethod
    def timestamp(cls, timestamp_ms: int) -> FilePosition:
        return cls(PositionKind.TIMESTAMP, timestamp_ms)

    @classmethod
    def parse(cls, text: str) -> FilePosition:
        """Parse ``beginning``, ``end``, ``seq:N`` or ``ts:MS`` (the CLI's ``--from``)."""
        if text in ("beginning", "end"):
            return cls(PositionKind(text))
        kind, sep, number = text.partition(":")
        if sep and kind in ("seq", "ts") and number.isdigit():
            return cls(PositionKind(kind), int(number))
        raise ValueError(f"position {text!r} is not beginning, end, seq:N or ts:MS")

    def __str__(self) -> str:
        if self.kind in (PositionKind.BEGINNING, PositionKind.END):
            return self.kind.value
        return f"{self.kind.value!s}:{self.value}"
