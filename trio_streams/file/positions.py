"""Where a reader can be moved to: the beginning, the tip, a sequence number or an instant.

Stream files use the core :class:`~trio_streams.core.positions.Position`, so a handler that seeks
with ``FilePosition.sequence(n)`` seeks the same way when its app runs on in-process transports
under ``app.test()``. ``FilePosition`` is that class under the name the stream-file API reads best
with; :func:`parse_position` and :func:`format_position` are the command line's text form of it.
"""

from __future__ import annotations

from ..core.positions import Position, PositionKind

__all__ = ["FilePosition", "format_position", "parse_position"]

#: The core position type: ``sequence(n)`` is inclusive (the first message of the stream with
#: seq >= n), ``timestamp(ms)`` exclusive (the first message strictly later than ``ms``).
FilePosition = Position


def parse_position(text: str) -> Position:
    """Parse ``beginning``, ``end``, ``seq:N`` or ``ts:MS`` (the CLI's ``--from``)."""
    if text == "beginning":
        return Position.beginning()
    if text == "end":
        return Position.end()
    kind, sep, number = text.partition(":")
    if sep and number.isdigit():
        if kind == "seq":
            return Position.sequence(int(number))
        if kind == "ts":
            return Position.timestamp(int(number))
    raise ValueError(f"position {text!r} is not beginning, end, seq:N or ts:MS")


def format_position(position: Position) -> str:
    """The text :func:`parse_position` reads back (the stream, if named, is not part of it)."""
    if position.kind is PositionKind.BEGINNING:
        return "beginning"
    if position.kind is PositionKind.END:
        return "end"
    short = "seq" if position.kind is PositionKind.SEQUENCE else "ts"
    return f"{short}:{position.value}"
