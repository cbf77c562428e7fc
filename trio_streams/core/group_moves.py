"""Moving a whole consumer group: what a move did (or, in a dry run, would do), and why one is
refused.

A consumer group's position is shared by its members: moving it is a broker operation
(``RedisBroker.set_group_position``, ``trio-streams group set-position``), and a handler's seek
only where the subscription is alone in its group or says it may move the others too. The
Redis transport moves a group with ``XGROUP SETID``; the in-process transport that stands in
for it under ``app.test()`` moves the group's shared cursor, and refuses what the live one
refuses with the same errors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import final

from .errors import TrioStreamsError

__all__ = [
    "GroupMove",
    "GroupMoveRefused",
    "GroupNotFound",
    "PositionRefused",
    "shared_group_refusal",
]


class GroupMoveRefused(TrioStreamsError):
    """A consumer group could not be moved; the message names the stream and the group and
    says why. Nothing was moved."""


class GroupNotFound(GroupMoveRefused):
    """The stream, or the consumer group on it, does not exist (the message names both)."""

    def hint(self) -> str:
        return "a group is created by its first subscription's start (or XGROUP CREATE)"


class PositionRefused(GroupMoveRefused):
    """The position cannot address the group's stream (a sequence number on a Redis stream,
    an entry past its last one, another stream); the message says why."""


def shared_group_refusal(label: str, stream: str, group: str, others: Sequence[str]) -> str:
    """Why a handler's seek is refused while other consumers of its group are live (the same
    words live and under ``app.test()``)."""
    shown = ", ".join(repr(name) for name in sorted(others)[:5])
    more = f" and {len(others) - 5} more" if len(others) > 5 else ""
    return (
        f"{label}: group {group!r} of stream {stream!r} is shared with live consumers "
        f"({shown}{more}): a seek moves the whole group, theirs too; mount the subscription "
        "with RedisStream(..., shared_seek=True) to allow it, or move the group with "
        "broker.set_group_position"
    )


@final
@dataclass(frozen=True, slots=True)
class GroupMove:
    """What moving a group did, or in a dry run (``moved`` False) would do.

    ``was`` and ``now`` are the group's last delivered entry before and after (an entry id;
    a sequence number in process; ``0-0``/``0``: nothing yet): the next entry the group
    delivers is the first one after ``now``. Moving forward ``skipped`` entries are passed
    over (never delivered to the group unless it moves back); moving back ``replayed`` entries
    are delivered again; ``first`` and ``last`` are the ids of the first and last of them
    (None when there are none). ``entries_read`` is the read counter set with the move (Redis
    ``ENTRIESREAD``, so the group's lag stays right), None where none was set. ``pending`` is
    how many entries the group's pending list holds: a move leaves them as they are.
    ``consumers`` are the group's consumers at the move.
    """

    stream: str
    group: str
    was: str
    now: str
    skipped: int
    replayed: int
    first: str | None
    last: str | None
    entries_read: int | None
    pending: int
    consumers: tuple[str, ...]
    moved: bool

    def describe(self) -> str:
        """One line: ``group 'g' of stream 's': 5-0 -> 10-0, skipped 5 entries (6-0 .. 10-0)``
        (``would skip`` in a dry run)."""
        span = f" ({self.first} .. {self.last})" if self.first is not None else ""
        if self.replayed:
            count = _entries(self.replayed)
            what = f"delivers {count} again" if self.moved else f"would deliver {count} again"
        else:
            what = f"{'skipped' if self.moved else 'would skip'} {_entries(self.skipped)}"
        line = (
            f"group {self.group!r} of stream {self.stream!r}: last delivered {self.was} -> "
            f"{self.now}, {what}{span}"
        )
        if self.entries_read is not None:
            line += f"; entries read {'set to' if self.moved else 'would be'} {self.entries_read}"
        if self.pending:
            line += f"; {self.pending} pending stay pending"
        if not self.moved:
            line += " (dry run: nothing moved)"
        return line


def _entries(count: int) -> str:
    return f"{count} {'entry' if count == 1 else 'entries'}"
