"""Moving an in-process consumer group's shared cursor: what ``RedisBroker.set_group_position``
does under ``app.test()``, with the refusals of the live one.

Positions are the live ones' (see :mod:`trio_streams.redis.group_position`): the beginning, the
end (the tip now), an instant (the first message strictly later; refused if there is none).
In-process streams are addressed by sequence numbers, so an entry id is refused here (as a plain
stream's seek to one is under ``app.test()``), and so is a sequence number (the live stream
refuses it; the caller says so before asking). The group's last delivered message is its
sequence number (``0``: none yet).
"""

from __future__ import annotations

from ..core.group_moves import GroupMove, GroupNotFound, PositionRefused
from ..core.positions import Position, PositionKind
from ..core.transport import SeekRefused
from .log import Cursor, Group, MemoryHub

__all__ = ["move_memory_group"]


def _target(hub: MemoryHub, stream: str, position: Position) -> Cursor:
    """A cursor of ``stream`` at ``position`` (:class:`PositionRefused` if out of reach)."""
    if position.kind is PositionKind.ENTRY:
        raise PositionRefused(
            f"stream {stream!r}: {position!r} is a Redis entry id; in-process streams are "
            "addressed by sequence numbers and instants (app.test())"
        )
    try:
        return Cursor(hub, (stream,), position)
    except SeekRefused as exc:
        said = str(exc)  # named once: the stream where the refusal does not name it already
        named = f"stream {stream!r}"
        raise PositionRefused(said if named in said else f"{named}: {said}") from None


def group_of(hub: MemoryHub, stream: str, group: str) -> Group:
    """The in-process group ``group`` of ``stream``; :class:`GroupNotFound` if there is none."""
    if stream not in hub.streams():
        raise GroupNotFound(
            f"stream {stream!r} does not exist, so it has no consumer group {group!r}"
        )
    found = hub.find_group((stream,), group)
    if found is None:
        names = ", ".join(repr(name) for name in hub.group_names((stream,))) or "none"
        raise GroupNotFound(
            f"stream {stream!r} has no consumer group {group!r} (its groups: {names})"
        )
    return found


def move_memory_group(
    hub: MemoryHub, stream: str, group: str, position: Position, *, dry_run: bool = False
) -> GroupMove:
    """Move the in-process ``group`` of ``stream`` to ``position``, or with ``dry_run`` only say
    what it would skip or replay (see the module docstring)."""
    if position.stream is not None and position.stream != stream:
        raise PositionRefused(f"{position!r} names stream {position.stream!r}, not {stream!r}")
    members = group_of(hub, stream, group)
    log = hub.log(stream)
    was = members.cursor.next_seqs[0] - 1
    now = _target(hub, stream, position).next_seqs[0] - 1
    low, high = sorted((was, now))
    low, high = max(low, log.first_seq - 1), min(high, log.next_seq - 1)
    count = max(0, high - low)
    if not dry_run:
        members.cursor.move_to(now + 1)
        hub.wake()
    return GroupMove(
        stream=stream,
        group=group,
        was=str(was),
        now=str(now),
        skipped=count if now > was else 0,
        replayed=count if now < was else 0,
        first=str(low + 1) if count else None,
        last=str(high) if count else None,
        entries_read=None,
        pending=members.pending,
        consumers=tuple(members.names),
        moved=not dry_run,
    )
