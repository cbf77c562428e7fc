"""Appending to a stream file: one writer per file per process, an exclusive lock across them.

:class:`StreamWriter` owns the file: it takes an exclusive ``flock`` (a second writer, in this or
another process, gets :class:`~trio_streams.file.errors.WriterLockedError` instead of corrupting
the file), encodes messages with a :class:`~trio_streams.file.encoder.FrameEncoder` into memory,
and writes them out on :meth:`StreamWriter.flush` (or once 1 MiB has built up). Followers see a
message as soon as it is flushed; only :meth:`StreamWriter.close` fsyncs.

Reopening an existing file continues it correctly (this deliberately differs from upstream): the
whole file is scanned once, so each stream's sequence numbers and the beacons' running checksums
continue from their true values; the write position is after the last complete frame; a trailing
end-of-stream message is overwritten by the next write; the header is never rewritten. A tail
that does not decode is truncated away only when it is provably a write cut short by a crash
(:func:`~trio_streams.file.repair.check_cut_tail`); otherwise, as for any corruption found by the
scan, opening raises a typed :class:`~trio_streams.file.errors.StreamFormatError` naming the
offset and leaves the file byte for byte as it was (``trio-streams file repair`` moves such a tail
aside).

Publishers of one path in one process share the writer through :class:`WriterRegistry`, which
counts references and closes the file when the last :class:`WriterHandle` is closed.
"""

from __future__ import annotations

import fcntl
import os
import time
from dataclasses import dataclass, field
from typing import Any

import trio

from ._closing import AsyncClosing
from .decoder import FrameDecoder
from .encoder import FrameEncoder, StreamState
from .errors import (
    FileRemovedError,
    StreamFileError,
    StreamFileNotFoundError,
    StreamFormatError,
    WriterClosedError,
    WriterLockedError,
)
from .format import (
    DEFAULT_BEACON_INTERVAL,
    HEADER_SIZE,
    Header,
    crc16,
    decode_header,
    encode_header,
)
from .reader import READ_CHUNK
from .repair import check_cut_tail, repair_hint

#: Buffered bytes that trigger a write without an explicit flush (as upstream: 1 MiB).
AUTO_FLUSH_BYTES = 1 << 20


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch: the timestamp unit of the format."""
    return time.time_ns() // 1_000_000


def lock_for_writing(fd: int, path: str) -> None:
    """Take the exclusive lock every writer of a stream file holds (dropped when ``fd`` closes).

    Raises :class:`WriterLockedError` at once if another writer (or repair) holds it.
    """
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        raise WriterLockedError(
            "another writer (another process, or another open of this file) holds its lock",
            path=path,
        ) from None


class StreamWriter:
    """The single writer of the stream file at ``path`` (created if missing).

    ``beacon_interval``, ``created_at_ms`` and ``file_name`` only matter when the file is created;
    an existing file keeps its header.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        beacon_interval: int = DEFAULT_BEACON_INTERVAL,
        created_at_ms: int | None = None,
        file_name: str | None = None,
    ) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StreamFileNotFoundError(
                f"cannot open for writing: {exc}", path=self.path
            ) from exc
        self._closed = False
        self._overwrite_at: int | None = None
        try:
            self._lock()
            size = os.fstat(self._fd).st_size
            if size == 0:
                self.header = Header(
                    os.path.basename(self.path) if file_name is None else file_name,
                    now_ms() if created_at_ms is None else created_at_ms,
                    beacon_interval,
                )
                self._write_at(encode_header(self.header), 0)
                self._encoder = FrameEncoder(beacon_interval, HEADER_SIZE, path=self.path)
            else:
                self._encoder = self._reopen(size)
        except BaseException:
            self._closed = True
            os.close(self._fd)
            raise
        self._flushed = self._encoder.offset
        self._encoder.beacon_now()

    def _lock(self) -> None:
        lock_for_writing(self._fd, self.path)

    def _reopen(self, size: int) -> FrameEncoder:
        """Scan the file to continue it: per-stream state, write position, trailing EOS."""
        self.header = decode_header(os.pread(self._fd, HEADER_SIZE, 0), self.path)
        interval = self.header.beacon_interval
        decoder = FrameDecoder(
            interval, HEADER_SIZE, internal=True, on_eos="include", path=self.path
        )
        states: dict[tuple[str, int], StreamState] = {}
        trailing_eos: tuple[int, StreamState | None] | None = None
        at = HEADER_SIZE
        while True:
            try:
                batch = decoder.next_messages(4096)
            except StreamFormatError as exc:
                exc.add_note(f"{self.path}: {repair_hint(self.path)}")
                raise
            for message in batch:
                state = states.get((message.stream_key, message.shard))
                if message.is_eos:
                    trailing_eos = (message.offset, None if state is None else state.copy())
                else:
                    trailing_eos = None
                if state is None:
                    state = states[(message.stream_key, message.shard)] = StreamState(
                        message.stream_key, message.shard
                    )
                state.seq = max(state.seq, message.seq)
                state.ts = max(state.ts, message.timestamp_ms)
                state.crcs.append(crc16(message.payload))
            if batch:
                continue  # until a call returns nothing: that call raises on corruption
            if at >= size:
                break
            data = os.pread(self._fd, READ_CHUNK, at)
            if not data:
                break
            at += len(data)
            decoder.feed(data)
        position = decoder.offset
        if size > position:
            # The file ends inside a frame or beacon. Cut it away only if it provably holds no
            # message (a write cut short by a crash): a damaged length field looks the same.
            check_cut_tail(
                self._read,
                interval,
                position,
                size,
                path=self.path,
                streams={k: (s.seq, s.ts) for k, s in states.items()},
            )
            os.ftruncate(self._fd, position)
        if trailing_eos is not None:
            position, before = trailing_eos
            key = (before.key, before.shard) if before else None
            internal = [k for k in states if k[0] == "SEA_STREAMER_INTERNAL" and k[1] == 0]
            for k in internal:
                del states[k]
            if before is not None and key is not None:
                states[key] = before
            self._overwrite_at = position
        encoder = FrameEncoder(interval, position, path=self.path)
        encoder.restore(list(states.values()))
        return encoder

    def _read(self, offset: int, n: int) -> bytes:
        return os.pread(self._fd, n, offset)

    # -- writing ---------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """File offset where the next message goes (including bytes not yet flushed)."""
        return self._encoder.offset

    @property
    def beacon_interval(self) -> int:
        return self.header.beacon_interval

    def last_sequences(self) -> dict[tuple[str, int], int]:
        """The highest sequence number of every (key, shard) the file holds, or was written."""
        return {(state.key, state.shard): state.seq for state in self._encoder.streams()}

    def last_seq(self, key: str, shard: int = 0) -> int:
        """The highest sequence number written to (key, shard); 0 if none."""
        return self._encoder.stream(key, shard).seq

    def append(
        self, key: str, payload: bytes, timestamp_ms: int | None = None
    ) -> tuple[int, int, int]:
        """Append the next message of ``key`` (shard 0); returns (seq, timestamp_ms, offset).

        The sequence number is the stream's last plus one; the timestamp defaults to now. The
        message is buffered: :meth:`flush` makes it visible to followers.
        """
        if self._closed:
            raise WriterClosedError("append to a closed writer", path=self.path)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        seq, offset = self._encoder.append(key, payload, timestamp_ms)
        if self._encoder.offset - self._flushed >= AUTO_FLUSH_BYTES:
            self.flush()
        return seq, timestamp_ms, offset

    def write_message(
        self, key: str, shard: int, seq: int, timestamp_ms: int, payload: bytes
    ) -> int:
        """Write a message with the exact shard and sequence number given (fixtures, tools).

        Returns its offset. Beacons record the highest sequence number seen per stream.
        """
        if self._closed:
            raise WriterClosedError("write to a closed writer", path=self.path)
        offset = self._encoder.write(key, shard, seq, timestamp_ms, payload)
        if self._encoder.offset - self._flushed >= AUTO_FLUSH_BYTES:
            self.flush()
        return offset

    def write_eos(self, timestamp_ms: int | None = None) -> int:
        """Write the end-of-stream message (buffered); returns its offset."""
        if self._closed:
            raise WriterClosedError("write to a closed writer", path=self.path)
        return self._encoder.write_eos(now_ms() if timestamp_ms is None else timestamp_ms)

    def flush(self) -> None:
        """Write out everything buffered, so followers see it. Does not fsync."""
        if self._closed:
            raise WriterClosedError("flush of a closed writer", path=self.path)
        data = self._encoder.take()
        if not data:
            return
        if os.fstat(self._fd).st_nlink == 0:
            raise FileRemovedError("stream file was removed from disk", path=self.path)
        if self._overwrite_at is not None:
            os.ftruncate(self._fd, self._overwrite_at)
            self._overwrite_at = None
        self._write_at(data, self._flushed)
        self._flushed += len(data)

    def _write_at(self, data: bytes, offset: int) -> None:
        view = memoryview(data)
        while view:
            try:
                written = os.pwrite(self._fd, view, offset)
            except OSError as exc:
                raise StreamFileError(
                    f"write failed: {exc}", path=self.path, offset=offset
                ) from exc
            view = view[written:]
            offset += written

    # -- closing ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, *, eos: bool = False, eos_timestamp_ms: int | None = None) -> None:
        """Optionally write end-of-stream, flush, fsync, unlock and close (blocking)."""
        if self._closed:
            return
        try:
            self._finish(eos, eos_timestamp_ms)
            os.fsync(self._fd)
        finally:
            self._release()

    async def aclose(self, *, eos: bool = False, eos_timestamp_ms: int | None = None) -> None:
        """As :meth:`close`, with the fsync in a worker thread; always completes (shielded)."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope(shield=True):
            try:
                self._finish(eos, eos_timestamp_ms)
                await trio.to_thread.run_sync(os.fsync, self._fd)
            finally:
                self._release()

    def _finish(self, eos: bool, eos_timestamp_ms: int | None) -> None:
        if eos:
            self.write_eos(eos_timestamp_ms)
        if self._encoder.buffered:
            self.flush()

    def _release(self) -> None:
        self._closed = True
        fd, self._fd = self._fd, -1
        os.close(fd)  # closing the descriptor drops the flock

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class WriterHandle(AsyncClosing):
    """One publisher's share of a :class:`StreamWriter`; close it once when done.

    For a hot loop, call :attr:`writer`'s methods directly; the handle only adds reference
    counting.
    """

    def __init__(self, registry: WriterRegistry, writer: StreamWriter) -> None:
        self._registry = registry
        self.writer = writer
        self._closed = False

    @property
    def path(self) -> str:
        return self.writer.path

    def append(
        self, key: str, payload: bytes, timestamp_ms: int | None = None
    ) -> tuple[int, int, int]:
        """See :meth:`StreamWriter.append`."""
        if self._closed:
            raise WriterClosedError("append through a closed handle", path=self.path)
        return self.writer.append(key, payload, timestamp_ms)

    def flush(self) -> None:
        """See :meth:`StreamWriter.flush`."""
        self.writer.flush()

    def close(self, *, eos: bool = False) -> None:
        """Release this share; the last one closes the file (with EOS if any share asked)."""
        if not self._closed:
            self._closed = True
            self._registry._release(self.writer, eos, blocking=True)

    async def aclose(self, *, eos: bool = False) -> None:
        """As :meth:`close`, fsyncing in a worker thread when this is the last share."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        self._closed = True
        writer = self._registry._release(self.writer, eos, blocking=False)
        if writer is not None:
            await writer.aclose(eos=self._registry._eos.pop(writer.path, False))
        else:
            await trio.lowlevel.checkpoint()

    def __enter__(self) -> WriterHandle:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass
class WriterRegistry:
    """One :class:`StreamWriter` per resolved path in this process, shared by reference count."""

    _writers: dict[str, StreamWriter] = field(default_factory=dict)
    _refs: dict[str, int] = field(default_factory=dict)
    _eos: dict[str, bool] = field(default_factory=dict)

    def acquire(self, path: str | os.PathLike[str], **options: Any) -> WriterHandle:
        """A handle on the writer of ``path``, opening it (with ``options``) if it is not open.

        ``options`` are :class:`StreamWriter`'s keyword arguments; they are ignored when the
        writer is already open.
        """
        key = os.path.realpath(path)
        writer = self._writers.get(key)
        if writer is None:
            writer = StreamWriter(key, **options)
            self._writers[key] = writer
            self._refs[key] = 0
        self._refs[key] += 1
        return WriterHandle(self, writer)

    def _release(self, writer: StreamWriter, eos: bool, *, blocking: bool) -> StreamWriter | None:
        key = writer.path
        self._eos[key] = self._eos.get(key, False) or eos
        self._refs[key] -= 1
        if self._refs[key] > 0:
            return None
        del self._refs[key], self._writers[key]
        if blocking:
            writer.close(eos=self._eos.pop(key, False))
            return None
        return writer

    def __len__(self) -> int:
        return len(self._writers)


#: The process-wide registry used unless another is passed in.
writers = WriterRegistry()
