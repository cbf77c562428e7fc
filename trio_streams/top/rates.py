"""Rows of ``trio-streams top``: two snapshots, and the rates between them.

Per stream: entries added per second (from ``entries-added``; the change in length on a server
before Redis 7). Per group: delivered per second is the change in ``entries-read`` (new entries
handed to the group's consumers); acked per second is what was delivered minus what pending
grew by (an ``XACK`` is what takes an entry off the pending list; claims move entries between
consumers without changing the group's count). Without a previous snapshot the rates are None
(shown as ``-``). A consumer is *stuck* when it holds pending entries and has been idle at
least ``stuck_after`` seconds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import final

from .file_sample import FileSnapshot
from .redis_sample import ConsumerSample, RedisSnapshot

__all__ = ["FileRow", "GroupRow", "StreamRow", "file_rows", "redis_rows"]


@final
@dataclass(frozen=True, slots=True)
class GroupRow:
    name: str
    pending: int
    lag: int | None
    delivered_per_s: float | None
    acked_per_s: float | None
    consumers: tuple[ConsumerSample, ...]
    stuck: tuple[str, ...]


@final
@dataclass(frozen=True, slots=True)
class StreamRow:
    key: str
    length: int
    added_per_s: float | None
    groups: tuple[GroupRow, ...]
    #: The stream this one holds dead letters of ("" if unknown), None if it is not one.
    dead_letter_of: str | None
    delayed: int
    delayed_due: int


@final
@dataclass(frozen=True, slots=True)
class FileRow:
    key: str
    messages: int
    per_s: float | None
    first_seq: int
    last_seq: int


def _per_s(now: int | None, before: int | None, seconds: float) -> float | None:
    if now is None or before is None or seconds <= 0:
        return None
    return (now - before) / seconds


def redis_rows(
    now: RedisSnapshot, before: RedisSnapshot | None, *, stuck_after: float = 30.0
) -> list[StreamRow]:
    """One row per stream of ``now``, rates against ``before`` (sorted by key)."""
    seconds = 0.0 if before is None else now.at - before.at
    rows: list[StreamRow] = []
    for key in sorted(now.streams):
        stream = now.streams[key]
        old = None if before is None else before.streams.get(key)
        if old is None:
            added = None
        elif stream.entries_added is not None and old.entries_added is not None:
            added = _per_s(stream.entries_added, old.entries_added, seconds)
        else:
            added = _per_s(stream.length, old.length, seconds)
        old_groups = {} if old is None else {g.name: g for g in old.groups}
        groups = []
        for group in stream.groups:
            prior = old_groups.get(group.name)
            delivered = (
                None if prior is None else _per_s(group.entries_read, prior.entries_read, seconds)
            )
            acked = None
            if prior is not None and delivered is not None:
                acked = delivered - (group.pending - prior.pending) / seconds
            stuck = tuple(
                c.name for c in group.consumers if c.pending > 0 and c.idle_ms >= stuck_after * 1000
            )
            groups.append(
                GroupRow(
                    group.name, group.pending, group.lag, delivered, acked, group.consumers, stuck
                )
            )
        rows.append(
            StreamRow(
                key,
                stream.length,
                added,
                tuple(groups),
                stream.dead_letter_of,
                stream.delayed,
                stream.delayed_due,
            )
        )
    return rows


def file_rows(now: FileSnapshot, before: FileSnapshot | None) -> list[FileRow]:
    """One row per stream key of the file, messages per second against ``before``."""
    seconds = 0.0 if before is None else now.at - before.at
    rows = []
    for key in sorted(now.keys):
        sample = now.keys[key]
        # Messages written since the previous snapshot, not messages read: while catching up on
        # a file that grew, the new ones are not all read yet, so the rate is unknown.
        per_s: float | None = None
        known = before is not None and (now.behind == 0 or now.size == before.size)
        if known and seconds > 0:
            per_s = sample.fresh / seconds
        rows.append(FileRow(key, sample.messages, per_s, sample.first_seq, sample.last_seq))
    return rows
