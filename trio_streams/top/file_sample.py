"""Snapshots of a stream file for ``trio-streams top``: read on from where the last one stopped.

A :class:`FileSampler` keeps one reader open and, at each snapshot, reads at most ``budget``
bytes more, so a huge file shows at once and catches up over a few refreshes. Per stream key it
counts messages and keeps the sequence and time range; "bytes behind" is how much of the file
the sampler has not read yet (0 once it has caught up with the writer). Reading never locks the
file: the writer goes on as if nobody watched.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import final

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


@final
@dataclass(frozen=True, slots=True)
class FileSnapshot:
    """A file's keys at ``at`` (Trio's clock, seconds); ``size - offset`` bytes not read yet."""

    path: str
    at: float
    size: int
    offset: int
    keys: dict[str, KeySample] = field(default_factory=dict)

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


class FileSampler:
    """Reads the stream file at ``path`` incrementally; close it when done."""

    def __init__(
        self, path: str | os.PathLike[str], *, budget: int = BUDGET, batch: int = 4096
    ) -> None:
        self.path = os.fspath(path)
        self._reader = FileReader(self.path, on_eos="hold")
        self._budget = budget
        self._batch = batch
        self._counts: dict[str, _Counts] = {}

    def sample(self, now: float) -> FileSnapshot:
        """Read up to the budget (blocking file reads), then snapshot at ``now``."""
        reader = self._reader
        stop_at = reader.offset + self._budget
        while reader.offset < stop_at:
            batch = reader.read_messages(self._batch)
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
            if not batch:
                break
        keys = {
            key: KeySample(key, c.messages, c.first_seq, c.last_seq, c.first_ts, c.last_ts)
            for key, c in self._counts.items()
        }
        return FileSnapshot(self.path, now, reader.file_size(), reader.offset, keys)

    def close(self) -> None:
        self._reader.close()

    def __enter__(self) -> FileSampler:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
