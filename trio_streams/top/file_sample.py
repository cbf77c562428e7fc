"""Snapshots of a stream file for ``trio-streams top``: read on from where the last one stopped.

A :class:`FileSampler` keeps one reader open and, at each snapshot, reads at most ``budget``
bytes more, so a huge file shows at once and catches up over a few refreshes. The budget holds
whatever the messages' size: a batch (at most ``batch`` messages) is never larger than the
budget left allows for messages as large as the largest seen, the first batch is of one message,
and a snapshot reads at least one message (a message larger than the budget is read alone).
Per stream key it counts messages and keeps the sequence and time range; "bytes behind" is how
much of the file the sampler has not read yet (0 once it has caught up with the writer). Reading
never locks the file: the writer goes on as if nobody watched.

A rate is of messages written, not of messages read: each snapshot also counts, per key, the
messages it read that were not in the file when the previous snapshot began (``fresh``). Old
messages read while catching up are not among them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import final

from ..file.format import Message
from ..file.reader import FileReader

__all__ = ["FileSampler", "FileSnapshot", "KeySample"]

#: Bytes one snapshot reads at most.
BUDGET = 64 << 20


@final
@dataclass(frozen=True, slots=True)
class KeySample:
    key: str
    messages: int
    first_seq: int
    last_seq: int
    first_ts: int
    last_ts: int
    #: Messages read by this snapshot that were appended since the previous one began.
    fresh: int = 0


@final
@dataclass(frozen=True, slots=True)
class FileSnapshot:
    """A file's keys at ``at`` (Trio's clock, seconds); ``size - offset`` bytes not read yet."""

    path: str
    at: float
    size: int
    offset: int
    keys: dict[str, KeySample] = field(default_factory=dict)
    #: The file's size when this snapshot began to read (what is past it is new next time).
    mark: int = 0

    @property
    def behind(self) -> int:
        return max(0, self.size - self.offset)


@dataclass
class _Counts:
    messages: int = 0
    first_seq: int = 0
    last_seq: int = 0
    first_ts: int = 0
    last_ts: int = 0
    fresh: int = 0


class FileSampler:
    """Reads the stream file at ``path`` incrementally; close it when done."""

    def __init__(
        self, path: str | os.PathLike[str], *, budget: int = BUDGET, batch: int = 256
    ) -> None:
        self.path = os.fspath(path)
        self._reader = FileReader(self.path, on_eos="hold")
        self._budget = budget
        self._batch = batch
        self._counts: dict[str, _Counts] = {}
        #: The largest frame seen (bytes, with any beacon before it): sizes the next batch (the
        #: first is of one message).
        self._largest = 0
        self._mark: int | None = None

    def sample(self, now: float) -> FileSnapshot:
        """Read up to the budget (blocking file reads), then snapshot at ``now``."""
        reader = self._reader
        fresh_from = self._mark
        self._mark = mark = reader.file_size()
        for counts in self._counts.values():
            counts.fresh = 0
        start = reader.offset
        stop_at = start + self._budget
        while (left := stop_at - reader.offset) > 0:
            # No larger than the budget left allows for messages as large as the largest seen;
            # one message to learn their size, and one at least per snapshot.
            count = min(self._batch, left // self._largest) if self._largest else 1
            if count == 0:
                if reader.offset > start:
                    break
                count = 1
            began = reader.offset
            batch = reader.read_messages(count)
            if not batch:
                break
            self._count(batch, fresh_from)
            ends = [m.offset for m in batch[1:]] + [reader.offset]
            sizes = [end - m.offset for m, end in zip(batch, ends, strict=True)]
            self._largest = max(self._largest, batch[0].offset - began + sizes[0], *sizes)
        keys = {
            key: KeySample(key, c.messages, c.first_seq, c.last_seq, c.first_ts, c.last_ts, c.fresh)
            for key, c in self._counts.items()
        }
        return FileSnapshot(self.path, now, reader.file_size(), reader.offset, keys, mark)

    def _count(self, batch: list[Message], fresh_from: int | None) -> None:
        for message in batch:
            counts = self._counts.get(message.stream_key)
            if counts is None:
                counts = self._counts[message.stream_key] = _Counts(
                    first_seq=message.seq, first_ts=message.timestamp_ms
                )
            counts.messages += 1
            counts.first_seq = min(counts.first_seq, message.seq)
            counts.last_seq = max(counts.last_seq, message.seq)
            counts.first_ts = min(counts.first_ts, message.timestamp_ms)
            counts.last_ts = max(counts.last_ts, message.timestamp_ms)
            if fresh_from is not None and message.offset >= fresh_from:
                counts.fresh += 1

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> FileSampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
