"""The Trio message source over a stream file: live (follow the tip) or replay (read and end).

A source is driven by its owner, not by a task of its own::

    async with await FileSource.open(path, mode="replay", keys={"orders"}) as source:
        while True:
            batch = source.read_available(1024)   # never blocks; reads one chunk at most
            ...                                    # hand the messages on
            if not batch:
                if source.ended:
                    break
                await source.wait()                # wait for the file to grow

:meth:`FileSource.read_available` is synchronous: it decodes what is buffered and, when that is
short, reads one chunk from the page cache, so its cost per message is the decoder's.
:meth:`FileSource.wait` waits for the file to change: an inotify event from the shared
:class:`~trio_streams.file.watch.FileWatch` wakes it at once, and a timeout of 1 ms doubling to
1024 ms while the file stays quiet (reset as soon as data arrives) covers an OS that reports late
or not at all. Cancelling ``wait`` at any point loses nothing: it only waits. A file removed from
disk raises :class:`~trio_streams.file.errors.FileRemovedError` from ``wait`` once every message
written before the removal has been read.
"""

from __future__ import annotations

import os
from collections.abc import Collection
from typing import Literal

import trio

from ..core.positions import Position
from .errors import FileRemovedError
from .format import Header, Message
from .reader import FileReader
from .watch import FileWatch, WatchRegistry, watches

Mode = Literal["live", "replay"]
#: Polling timeout bounds while the file stays quiet, in milliseconds.
MIN_BACKOFF_MS = 1
MAX_BACKOFF_MS = 1024


class FileSource(trio.abc.AsyncResource):
    """Messages of one stream file, read in batches; see the module docstring for the loop.

    ``live``: starts after the last complete message and follows the file as it grows. An
    end-of-stream message at the tip is waited at, not delivered: a writer that reopens the file
    overwrites it, and the source goes on with what replaced it. An end-of-stream message that
    stays in the file (something was written after it) ends the stream, as it ends a replay and
    ``file decode``. ``replay``: starts at the first message and ends after the last one, or at
    an end-of-stream message; a frame cut by the end of the file is a
    :class:`~trio_streams.file.errors.TruncatedError`.

    Waiting at the tip (after the last message, before a trailing end-of-stream message or a
    frame still being written) never spins: :meth:`read_available` reports the end of what the
    file holds and :meth:`wait` sleeps until the file changes or the polling timeout expires.
    """

    def __init__(self, reader: FileReader, mode: Mode, watch: FileWatch, registry: WatchRegistry):
        self._reader = reader
        self.mode: Mode = mode
        self._watch = watch
        self._registry = registry
        self._ended = False
        self._seen_generation = watch.generation
        self._backoff_ms = MIN_BACKOFF_MS
        #: Woken by the watch and nothing read since: the next wait looks at the file first.
        self._stat_before_waiting = False
        self._closed = False

    @classmethod
    async def open(
        cls,
        path: str | os.PathLike[str],
        *,
        mode: Mode = "replay",
        keys: Collection[str] | None = None,
        registry: WatchRegistry | None = None,
    ) -> FileSource:
        """Open ``path`` for reading messages of ``keys`` (None: every stream but the internal).

        Opening reads the header and, for ``live``, scans the last beacon page for the tip.
        """
        if mode not in ("live", "replay"):
            raise ValueError(f"mode must be 'live' or 'replay', not {mode!r}")
        await trio.lowlevel.checkpoint()
        reader = FileReader(
            path,
            keys=keys,
            on_eos="hold" if mode == "live" else "stop",
            start=Position.end() if mode == "live" else None,
        )
        registry = watches if registry is None else registry
        return cls(reader, mode, registry.acquire(reader.path), registry)

    # -- properties ------------------------------------------------------------------------------

    @property
    def path(self) -> str:
        return self._reader.path

    @property
    def header(self) -> Header:
        return self._reader.header

    @property
    def offset(self) -> int:
        """File offset of the next message to be read."""
        return self._reader.offset

    @property
    def ended(self) -> bool:
        """Every message has been returned: a replay reached the end of the file or an
        end-of-stream message; a live source reached an end-of-stream message that stays."""
        return self._ended

    @property
    def backoff_ms(self) -> int:
        """The polling timeout the next quiet :meth:`wait` will use."""
        return self._backoff_ms

    @property
    def watch(self) -> FileWatch:
        return self._watch

    # -- reading ---------------------------------------------------------------------------------

    def read_available(self, max_n: int = 1024) -> list[Message]:
        """Up to ``max_n`` messages available now, without blocking; ``[]`` when none are.

        In replay mode an empty batch at the end of the file sets :attr:`ended`.
        """
        if self._closed:
            raise trio.ClosedResourceError("the file source is closed")
        if self._ended:
            return []
        self._seen_generation = self._watch.generation
        reader = self._reader
        batch = reader.read_messages(max_n)
        if batch:
            self._backoff_ms = MIN_BACKOFF_MS
            self._stat_before_waiting = False
        elif self.mode == "live":
            self._ended = reader.eos is not None
        else:
            if reader.eos is None and reader.decoder.pending:
                # The last frame may have been completed since it was read: look once more.
                batch = reader.read_messages(max_n)
                if batch:
                    return batch
                reader.check_finished()
            self._ended = reader.eos is not None or reader.at_eof
        return batch

    async def wait(self) -> None:
        """Wait until the file may hold more: an OS event, growth, or the polling timeout.

        Returns at once in replay mode or when unread bytes are known. Raises
        :class:`FileRemovedError` once the file is gone and everything in it was read, and
        :class:`~trio_streams.file.errors.UnprovenTailError` when a timeout passes at bytes that
        do not decode and cannot be a frame being written or cut by a crash (damage in the
        middle of the file, such as a damaged size field): within one polling timeout of the
        reader reaching it, at most about a second.
        """
        if self._closed:
            raise trio.ClosedResourceError("the file source is closed")
        reader = self._reader
        if self.mode == "replay" or not reader.at_eof:
            await trio.lowlevel.checkpoint()
            return
        if self._stat_before_waiting or not self._watch.uses_os_events:
            # Woken without finding anything (the event may be the file's removal), or no OS
            # watch: look at the file itself before waiting. Otherwise the watch already tells
            # of any change since the read that reached the end (its events stay queued until
            # read), so no system call is spent here between a handed-over batch and the wait.
            self._stat_before_waiting = False
            stat = reader.stat()
            if stat.st_size > reader.known_size:
                await trio.lowlevel.checkpoint()
                return
            if stat.st_nlink == 0:
                raise FileRemovedError("stream file was removed from disk", path=reader.path)
        with trio.move_on_after(self._backoff_ms / 1000) as timeout:
            await self._watch.wait_change(self._seen_generation)
        if not timeout.cancelled_caught:
            # Woken by the watch: read at once. Whether the file is gone is looked at before
            # the next wait, if this wake-up brings nothing to read.
            self._stat_before_waiting = True
            return
        self._backoff_ms = min(self._backoff_ms * 2, MAX_BACKOFF_MS)
        stat = reader.stat()
        if reader.known_size > reader.offset and stat.st_size <= reader.known_size:
            # Quiet for a whole timeout at bytes that do not decode yet: a frame still being
            # written, one cut by a crash (the next writer cuts it away), or damage.
            reader.check_stalled_tail()
        if stat.st_nlink == 0 and stat.st_size <= reader.known_size:
            raise FileRemovedError("stream file was removed from disk", path=reader.path)

    # -- moving ----------------------------------------------------------------------------------

    async def seek(
        self, position: Position, *, key: str | None = None, shard: int | None = None
    ) -> int:
        """Move to ``position`` and return the offset of the next message read.

        Runs to completion in short synchronous steps separated by checkpoints, so it can run in
        a shielded cancel scope; if it is cancelled anyway (unshielded), or refused with
        :class:`~trio_streams.file.errors.SeekOutOfRangeError`, the source is exactly where it
        was. See :meth:`FileReader.seek_steps` for where each position lands.
        """
        if self._closed:
            raise trio.ClosedResourceError("the file source is closed")
        await trio.lowlevel.checkpoint()
        steps = self._reader.seek_steps(position, key=key, shard=shard)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                offset = int(done.value)
                break
            await trio.lowlevel.checkpoint()
        self._ended = False
        self._backoff_ms = MIN_BACKOFF_MS
        return offset

    def resume(self, offset: int) -> None:
        """Replay: read on after the end, because this process wrote more from ``offset`` on.

        A replay that ended at the end of the file reads on from where it was. One that stopped
        at an end-of-stream message reads on from ``offset``: a writer reopening the file
        overwrites a trailing end-of-stream message, and whatever it wrote starts there.
        """
        if self._closed:
            raise trio.ClosedResourceError("the file source is closed")
        if not self._ended:
            return
        if self._reader.eos is not None:
            self._reader.rewind_to(offset)
        self._ended = False

    # -- closing ---------------------------------------------------------------------------------

    async def aclose(self) -> None:
        if not self._closed:
            self._closed = True
            self._reader.close()
            self._registry.release(self._watch)
        await trio.lowlevel.checkpoint()
