"""What ``top`` shows, whichever way it is shown: one :class:`Screen` of tables per refresh.

A :class:`Watch` is the thing watched (a Redis deployment or a stream file): :meth:`Watch.refresh`
takes a snapshot at Trio's time (rates against the previous one), and :meth:`Watch.screen` lays
out the latest one, sorted and filtered, so a new sort order shows at once without a snapshot
taken early. The text view prints one screen; the live view redraws it.
"""

from __future__ import annotations

import abc
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import final

import trio

from ..file.groups import GroupInfo, list_groups
from ..redis.client import RedisClient
from .file_sample import BUDGET, FileSampler, FileSnapshot
from .rates import StreamRow, file_rows, redis_rows
from .redis_sample import MAX_STREAMS, RedisSnapshot, sample_redis, scan_streams
from .render import (
    Table,
    consumer_table,
    file_table,
    group_table,
    select,
    stream_table,
    unreadable_group_table,
)

__all__ = ["FileWatch", "RedisWatch", "Screen", "Watch"]


@final
@dataclass(frozen=True, slots=True)
class Screen:
    """A title line and titled tables."""

    title: str
    tables: list[tuple[str, Table]] = field(default_factory=list)


class Watch(abc.ABC):
    """Something ``top`` watches."""

    @abc.abstractmethod
    async def refresh(self) -> None:
        """Take a snapshot now (rates since the previous one)."""

    @abc.abstractmethod
    def screen(self, *, sort: str, match: str) -> Screen:
        """The latest snapshot, sorted by ``sort`` and filtered by ``match``."""


class RedisWatch(Watch):
    """The streams of a deployment: those named, or those ``SCAN`` finds matching ``match``."""

    def __init__(
        self,
        client: RedisClient,
        label: str,
        *,
        streams: Sequence[str] = (),
        scan_match: str = "*",
        dead_letter_globs: Sequence[str] = (),
        stuck_after: float = 30.0,
    ) -> None:
        self._client = client
        self._label = label
        self._streams = list(streams)
        self._scan_match = scan_match
        self._globs = list(dead_letter_globs)
        self._stuck_after = stuck_after
        self._previous: RedisSnapshot | None = None
        self._rows: list[StreamRow] = []
        self._seconds: float | None = None
        self._more = False
        self._missing: list[str] = []

    async def refresh(self) -> None:
        if self._streams:
            keys, self._more = self._streams, False
        else:
            keys, self._more = await scan_streams(self._client, self._scan_match)
        snapshot = await sample_redis(
            self._client, keys, now=trio.current_time(), dead_letter_globs=self._globs
        )
        self._missing = [key for key in self._streams if key not in snapshot.streams]
        self._rows = redis_rows(snapshot, self._previous, stuck_after=self._stuck_after)
        self._seconds = None if self._previous is None else snapshot.at - self._previous.at
        self._previous = snapshot

    def screen(self, *, sort: str, match: str) -> Screen:
        shown = select(self._rows, sort=sort, match=match)
        over = "" if self._seconds is None else f", rates over {self._seconds:.2f} s"
        more = "+" if self._more else ""
        title = f"{self._label}: {len(shown)} of {len(self._rows)}{more} streams{over}"
        if self._more:
            title += (
                f"; only the first {MAX_STREAMS} streams found (by name) are shown: "
                "narrow with --match GLOB or name them with --stream"
            )
        if self._missing:
            names = ", ".join(repr(key) for key in self._missing)
            title += f"; no such stream: {names} (the key does not exist or is not a stream)"
        return Screen(
            title, [("streams", stream_table(shown)), ("consumers", consumer_table(shown))]
        )


class FileWatch(Watch):
    """The stream keys of one stream file (those in ``keys``, when given), and its consumer
    groups (those reading one of ``keys``): each group's lag is counted up to the sampler's
    reading budget per refresh, so a group far behind shows at once, as ``N+``."""

    def __init__(self, sampler: FileSampler, *, keys: Sequence[str] = ()) -> None:
        self._sampler = sampler
        self._keys = frozenset(keys)
        self._previous: FileSnapshot | None = None
        self._latest: FileSnapshot | None = None
        self._groups: list[GroupInfo] = []
        self._now_ms = 0

    async def refresh(self) -> None:
        await trio.lowlevel.checkpoint()
        self._previous, self._latest = self._latest, self._sampler.sample(trio.current_time())
        # In a thread: counting lag reads the file, and a frozen member can hold the lock.
        path = self._sampler.path
        groups = await trio.to_thread.run_sync(lambda: list_groups(path, scan_budget=BUDGET))
        if self._keys:
            groups = [g for g in groups if g.error is not None or self._keys & set(g.keys)]
        self._groups, self._now_ms = groups, int(time.time() * 1000)

    def screen(self, *, sort: str, match: str) -> Screen:
        snapshot = self._latest
        assert snapshot is not None, "refresh() first"
        rows = file_rows(snapshot, self._previous)
        seconds = None if self._previous is None else snapshot.at - self._previous.at
        if self._keys:
            rows = [row for row in rows if row.key in self._keys]
        if match:
            rows = [row for row in rows if match in row.key]
        if sort == "rate":
            rows.sort(key=lambda row: -(row.per_s or 0.0))
        elif sort == "length":
            rows.sort(key=lambda row: -row.messages)
        over = "" if seconds is None else f", rates over {seconds:.2f} s"
        title = (
            f"{snapshot.path}: {snapshot.size} bytes, {snapshot.behind} bytes behind the "
            f"writer{over}"
        )
        tables = [("keys", file_table(rows))]
        if any(group.error is None for group in self._groups):
            tables.append(("groups", group_table(self._groups, self._now_ms)))
        if any(group.error is not None for group in self._groups):
            tables.append(("unreadable groups", unreadable_group_table(self._groups)))
        return Screen(title, tables)
