"""Positions in a replayable stream: beginning, end, a sequence number, or an instant.

One type serves every seekable transport (stream files, in-process), so a handler written
against a stream file seeks the same way when its app runs on in-process transports in tests.
Values are validated when the position is built, by the named constructors and by the raw
``Position(kind, value, ...)`` constructor alike: an out-of-range value, a value of the wrong type
or a kind that is not a :class:`PositionKind` raises :class:`InvalidPosition` there and never
reaches a client or a subscription's driver.
"""

from __future__ import annotations

import datetime as _dt
import enum
from dataclasses import dataclass
from typing import final

from .errors import ConfigurationError

__all__ = [
    "MAX_SEQUENCE",
    "MAX_SHARD",
    "MAX_TIMESTAMP_MS",
    "InvalidPosition",
    "Position",
    "PositionKind",
    "delivered_position",
]

#: Sequence numbers are unsigned 64-bit on the wire.
MAX_SEQUENCE = 2**64 - 1
#: Shard ids are unsigned 64-bit on the wire.
MAX_SHARD = 2**64 - 1
#: The latest instant a stream file can hold: 9999-12-31T23:59:59.999Z, in milliseconds.
MAX_TIMESTAMP_MS = 253_402_300_799_999


class InvalidPosition(ConfigurationError):
    """A position was built from a value no stream can hold."""


class PositionKind(enum.Enum):
    BEGINNING = "beginning"
    END = "end"
    SEQUENCE = "sequence"
    TIMESTAMP = "timestamp"
    #: A Redis stream entry id ``<ms>-<seq>``, held in ``value`` as ``ms << 64 | seq`` (so
    #: positions of one stream compare as their ids do). Stream files and in-process streams are
    #: addressed by sequence numbers and instants, and refuse it.
    ENTRY = "entry"


@final
@dataclass(frozen=True, slots=True)
class Position:
    """Where a subscription reads next.

    - ``Position.beginning()``: the first message still held.
    - ``Position.end()``: the tip; only messages written afterwards.
    - ``Position.sequence(n)``: the first message of the stream with sequence >= n. Inclusive, so
      seeking to the position of a delivery delivers that same message again.
    - ``Position.timestamp(ms)``: the first message strictly later than ``ms`` (Unix epoch ms).
    - ``Position.entry("1526985054069-0")``: a Redis stream entry id (Redis transports only).

    ``stream`` names the stream a sequence or timestamp refers to; it may be left out when the
    subscription reads a single stream. ``shard`` names the shard of that stream (stream files
    written by sharded producers; every other stream has one shard): a position read off a
    delivery from a shard other than 0 names it, so seeking to it redelivers that message. Left
    out, a seek considers the stream's messages in every shard (exact when a stream lives in one
    shard, as every writer's default does).

    Every way of building a position validates it (see :class:`InvalidPosition`).
    """

    kind: PositionKind
    value: int | None = None
    stream: str | None = None
    shard: int | None = None

    def __post_init__(self) -> None:
        kind = self.kind
        if kind is PositionKind.SEQUENCE:
            _checked_int("sequence", self.value, 0, MAX_SEQUENCE)
        elif kind is PositionKind.TIMESTAMP:
            _checked_int("timestamp", self.value, 0, MAX_TIMESTAMP_MS)
        elif kind is PositionKind.ENTRY:
            _checked_int("entry id", self.value, 0, _MAX_ENTRY)
        elif kind is PositionKind.BEGINNING or kind is PositionKind.END:
            if self.value is not None or self.stream is not None or self.shard is not None:
                raise InvalidPosition(
                    f"a {kind.value} position takes no value, stream or shard "
                    f"(got {self.value!r}, {self.stream!r}, {self.shard!r})"
                )
            return
        else:
            raise InvalidPosition(f"a position's kind is a PositionKind, not {kind!r}")
        stream = self.stream
        if stream is not None and (not isinstance(stream, str) or not stream):
            raise InvalidPosition(f"a position's stream is a non-empty str, not {stream!r}")
        if self.shard is not None:
            _checked_int("shard", self.shard, 0, MAX_SHARD)

    @classmethod
    def beginning(cls) -> Position:
        return _BEGINNING

    @classmethod
    def end(cls) -> Position:
        return _END

    @classmethod
    def sequence(cls, n: int, *, stream: str | None = None, shard: int | None = None) -> Position:
        return cls(PositionKind.SEQUENCE, n, stream, shard)

    @classmethod
    def timestamp(cls, ms: int, *, stream: str | None = None, shard: int | None = None) -> Position:
        """The first message strictly later than ``ms`` milliseconds since the Unix epoch."""
        return cls(PositionKind.TIMESTAMP, ms, stream, shard)

    @classmethod
    def entry(cls, entry_id: str, *, stream: str | None = None) -> Position:
        """The Redis stream entry ``entry_id`` (``"<ms>-<seq>"``, both parts u64)."""
        if not isinstance(entry_id, str):
            raise InvalidPosition(f"an entry id is a str like '1526985054069-0', not {entry_id!r}")
        ms, sep, seq = entry_id.partition("-")
        if not (sep and ms.isdigit() and seq.isdigit() and ms.isascii() and seq.isascii()):
            raise InvalidPosition(f"entry id {entry_id!r} is not <ms>-<seq>")
        high, low = int(ms), int(seq)
        if high > MAX_SEQUENCE or low > MAX_SEQUENCE:
            raise InvalidPosition(f"entry id {entry_id!r} has a part outside [0, 2**64 - 1]")
        return cls(PositionKind.ENTRY, high << 64 | low, stream)

    @property
    def seq(self) -> int:
        """The sequence number of a sequence position (every delivery from a stream file or an
        in-process stream has one): ``position.seq - 10`` is typed ``int``."""
        if self.kind is not PositionKind.SEQUENCE or self.value is None:
            raise ValueError(f"{self!r} is not a sequence position")
        return self.value

    @property
    def entry_id(self) -> str:
        """The ``"<ms>-<seq>"`` text of an entry position."""
        if self.kind is not PositionKind.ENTRY or self.value is None:
            raise ValueError(f"{self!r} is not a Redis stream entry")
        return f"{self.value >> 64}-{self.value & MAX_SEQUENCE}"

    def describe(self) -> str:
        """A short text form for headers and logs: ``sequence:57``, ``timestamp:1700000000000``,
        ``entry:1526985054069-0``, ``beginning``, ``end`` (``@shard`` when one is named)."""
        kind: str = self.kind.value
        if self.kind in (PositionKind.BEGINNING, PositionKind.END):
            return kind
        value = self.entry_id if self.kind is PositionKind.ENTRY else str(self.value)
        text = f"{kind}:{value}"
        return text if self.shard is None else f"{text}@{self.shard}"

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
        return Position(self.kind, self.value, stream, self.shard)

    def __repr__(self) -> str:
        if self.kind in (PositionKind.BEGINNING, PositionKind.END):
            return f"Position.{self.kind.value}()"
        where = f", stream={self.stream!r}" if self.stream is not None else ""
        if self.shard is not None:
            where += f", shard={self.shard}"
        value = repr(self.entry_id) if self.kind is PositionKind.ENTRY else str(self.value)
        return f"Position.{self.kind.value}({value}{where})"


_new = object.__new__
_set = object.__setattr__


def delivered_position(seq: int, stream: str, shard: int | None = None) -> Position:
    """The position of a message a transport read: built without re-validating values that
    came from a checked frame or log entry (the hot path builds one per delivery)."""
    position: Position = _new(Position)
    _set(position, "kind", PositionKind.SEQUENCE)
    _set(position, "value", seq)
    _set(position, "stream", stream)
    _set(position, "shard", shard)
    return position


def _checked_int(what: str, value: object, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidPosition(f"a {what} position takes an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise InvalidPosition(f"{what} {value} is outside [{low}, {high}]")
    return value


_MAX_ENTRY = (1 << 128) - 1

_BEGINNING = Position(PositionKind.BEGINNING)
_END = Position(PositionKind.END)
