"""Appending to a stream file: any number of writers, in this process and others, one at a time.

:class:`StreamWriter` encodes messages with a :class:`~trio_streams.file.encoder.FrameEncoder`
into memory and writes them out on :meth:`StreamWriter.flush` (or once 1 MiB has built up).
Followers see a message as soon as it is flushed. When it reaches the disk is the writer's
``durability`` (:mod:`.durability`): synced before each write-out returns (``"publish"``), at most
``sync_interval`` seconds after it (``"interval"``, the default) or at :meth:`StreamWriter.close`
only (``"close"``).

**Many writers.** Appends are serialized by the file's exclusive ``flock``
(:class:`~trio_streams.file.lock.FileLock`), held only for the append itself: take the lock,
``fstat``, write, let go. A writer that finds the file longer than it left it catches up first
(:mod:`.catchup`): it counts what the others appended — sequence numbers, timestamps, the
beacons' running checksums and round-robin, the write position — and encodes its buffered
messages again after theirs. So sequence numbers stay dense per stream whoever writes, and the
file is byte for byte what one writer would have written for the same messages in the same order.
When nobody else wrote, a flush costs two ``flock`` calls and one ``fstat`` more than the write.
The numbers :meth:`StreamWriter.append` returns are those the message gets *unless* another
writer appends before this one flushes; :meth:`StreamWriter.publish` (and its async and batch
kin) append under the lock and return final :class:`Receipt` values.

A writer learns what the others appended from the **tip record** the last of them left beside
the file (:mod:`.tip`): written under the lock after each append while writers take turns (and
every 16 KiB and at close by a writer alone), it holds the state the next writer continues from,
and is adopted only when it provably describes the file; otherwise the writer decodes the
others' messages (:mod:`.catchup`), the part they finished before it takes the lock outside it.

While others keep appending (the last flush had to catch up), a writer builds each message's
frame as it is appended, with a provisional sequence number, and under the lock only numbers
the frames (rewriting a seq another writer took) and places the beacons
(:meth:`~trio_streams.file.encoder.FrameEncoder.append_frames`). So the lock is held for the
numbering and the write, not for encoding, and never for decoding the others' messages while
they keep records. The first flush that finds nobody else wrote returns the writer to encoding
on append.

**Reopening** an existing file is the same catch-up from the header on (this deliberately
differs from upstream): each stream's sequence numbers and the beacons' running checksums and
round-robin continue from their true values; the write position is after the last complete
frame; a trailing end-of-stream message is overwritten by the next write; the header is never
rewritten. A tail that does not decode is truncated away only when it is provably a write cut
short by a crash (:func:`~trio_streams.file.repair.check_cut_tail`); otherwise, as for any
corruption found, the append raises a typed
:class:`~trio_streams.file.errors.StreamFormatError` naming the offset and leaves the file byte
for byte as it was (``trio-streams file repair`` moves such a tail aside).

``StreamWriter(path, exclusive=True)`` holds the lock from open to close instead, for tools that
need the file to themselves (``trio-streams file write`` checks the sequence numbers it is given
against the file's); other writers wait meanwhile, and it fails with
:class:`~trio_streams.file.errors.WriterLockedError` if their appends keep it out for 10 s.

Publishers of one path in one process share one writer through :class:`WriterRegistry`, which
counts references and closes the file when the last :class:`WriterHandle` is closed.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple, final

from ..core.positions import Position
from .catchup import catch_up
from .durability import (
    DEFAULT_DURABILITY,
    Durability,
    check_durability,
    stronger,
    sync_data,
    sync_directory,
)
from .encoder import FrameEncoder
from .errors import (
    FileRemovedError,
    StreamFileError,
    StreamFileNotFoundError,
    StreamFormatError,
    TimestampRangeError,
    WriterClosedError,
)
from .format import (
    DEFAULT_BEACON_INTERVAL,
    FRAME_FIXED,
    HEADER_SIZE,
    MAX_PAYLOAD_BYTES,
    MAX_TIMESTAMP_MS,
    Header,
    crc16,
    decode_header,
    encode_header,
    encode_key,
    is_header_prefix,
)
from .lock import FileLock, hold_exclusively
from .tip import TipFile, remove_tip


class _TrioOnFirstUse:
    """Trio, imported when the writer's async side first uses it: a script or a command that
    only appends (``trio-streams publish``) starts without importing Trio. The first attribute
    read puts the module itself in this module's globals, so later reads are plain globals."""

    def __getattr__(self, name: str) -> Any:
        import trio as module

        globals()["trio"] = module
        return getattr(module, name)


if TYPE_CHECKING:
    import trio
else:
    trio = _TrioOnFirstUse()

#: Buffered bytes that trigger a write without an explicit flush (as upstream: 1 MiB).
AUTO_FLUSH_BYTES = 1 << 20
#: A writer alone records the tip (:mod:`.tip`) once it appended this much since the last
#: record (and at close), so a writer that comes later decodes at most this much, and a
#: record costs a small share of the appending.
TIP_EVERY_BYTES = 16 << 10
#: Seconds after it last found others' appends that a writer records the tip at every
#: write-out (they take turns with it: each reads the record instead of decoding).
TIP_WINDOW = 5.0

_pack_fixed = FRAME_FIXED.pack
_pack_tail = struct.Struct(">HB").pack

#: A message to publish: (stream key, payload, timestamp in ms or None for now).
Item = tuple[str, bytes, int | None]


def now_ms() -> int:
    """Wall-clock milliseconds since the Unix epoch: the timestamp unit of the format."""
    return time.time_ns() // 1_000_000


@final
class Receipt(NamedTuple):
    """Where a published message went: its stream, sequence number, timestamp and offset."""

    stream: str
    seq: int
    timestamp_ms: int
    #: File offset of the message's frame.
    offset: int
    shard: int = 0

    @property
    def position(self) -> Position:
        """The position a reader seeks to for this message (inclusive)."""
        return Position.sequence(self.seq, stream=self.stream, shard=self.shard or None)

    def __str__(self) -> str:
        return f"{self.stream} seq:{self.seq} ts:{self.timestamp_ms} offset:{self.offset}"


class StreamWriter:
    """A writer of the stream file at ``path`` (created if missing), one of any number.

    ``beacon_interval``, ``created_at_ms`` and ``file_name`` only matter when the file is created;
    an existing file keeps its header. ``exclusive=True`` holds the file's lock until
    :meth:`close` (see the module docs).

    ``durability`` says what a receipt promises if the machine loses power (a killed process
    loses nothing written out, whatever the setting):

    - ``"publish"``: every write-out — each :meth:`publish`, each batch of :meth:`publish_many`
      (one sync per batch), each :meth:`flush` — is on disk before the call returns.
    - ``"interval"`` (the default): what is written out is on disk at most ``sync_interval``
      seconds (default 1) later, plus the time a sync under way takes, while :meth:`keep_synced`
      runs in a nursery (a ``FileBroker`` runs it; publishing then never waits for a sync);
      without it, the first write-out at least ``sync_interval`` seconds after the last sync
      syncs, and :meth:`close` does.
    - ``"close"``: only :meth:`close` syncs.

    A bad setting raises :class:`~trio_streams.file.durability.DurabilitySettingError` naming
    the parameter.

    Opening counts the existing file, under the lock if it is free (so a damaged tail is
    reported at once), else what other writers finished and the rest at the first flush; it
    waits for the lock only while another writer creates the file. Not thread-safe: use a
    writer from one thread.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        beacon_interval: int = DEFAULT_BEACON_INTERVAL,
        created_at_ms: int | None = None,
        file_name: str | None = None,
        exclusive: bool = False,
        durability: Durability = DEFAULT_DURABILITY,
        sync_interval: float | None = None,
    ) -> None:
        self.path = os.fspath(path)
        self.durability, self.sync_interval = check_durability(durability, sync_interval)
        #: Bytes were written since the last sync (they may not be on disk).
        self._unsynced = False
        #: When the last sync began (``time.monotonic``).
        self._last_sync = time.monotonic()
        #: Set when a write leaves bytes unsynced, for :meth:`keep_synced` (None: none waits).
        self._dirty: trio.Event | None = None
        #: How many :meth:`keep_synced` run: while one does, writes leave the syncing to it.
        self._keepers = 0
        #: This writer created the file: its first sync also syncs the directory.
        self._created = False
        try:
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as exc:
            raise StreamFileNotFoundError(
                f"cannot open for writing: {exc}", path=self.path
            ) from exc
        self._closed = False
        self._lock = FileLock(self._fd, self.path)
        #: The tip record beside the file (:mod:`.tip`), once the header is known.
        self._tip: TipFile | None = None
        #: Bytes this writer appended since it last recorded the tip.
        self._untipped = 0
        #: The flush under way is the last (:meth:`close`): it records the tip.
        self._closing = False
        #: Until when (``time.monotonic``) every write-out records the tip: others appended
        #: lately, and are likely to take the lock next.
        self._tip_always_until = 0.0
        #: Until when the others are taken to keep records (one served a catch-up lately).
        self._tips_flowing_until = 0.0
        #: Messages this writer decoded to catch up with the file (at open and after others'
        #: appends), and the catch-ups a tip record spared it (for tests and benchmarks).
        self.decoded_to_catch_up = 0
        self.tips_adopted = 0
        #: The descriptor an exclusive writer holds the lock on for its lifetime.
        self._exclusive: int | None = None
        #: Where a trailing end-of-stream message starts that the next write overwrites.
        self._overwrite_at: int | None = None
        #: Others appended before the last flush: buffer messages unencoded (see module docs).
        self._contended = False
        #: What ``append`` encodes or buffers with (see :meth:`_use`).
        self._encode: Callable[[str, bytes, int], tuple[int, int]]
        #: Whether the flush under way found others' appends.
        self._others_appended = False
        #: Messages buffered unencoded, and what numbers and bytes they will take (provisional).
        #: Their frames, built with provisional sequence numbers (:meth:`_defer`), each as
        #: (key, that seq, timestamp, frame).
        self._pending: list[tuple[str, int, int, bytes]] = []
        #: The last provisional seq of each key buffered, and the key's bytes in a frame.
        self._pending_seqs: dict[str, list[Any]] = {}
        self._pending_bytes = 0
        try:
            if exclusive:
                self._exclusive = hold_exclusively(self._fd, self.path)
            elif not self._lock.try_acquire():
                # Another writer appends: count what is settled now, the first flush the rest
                # (under the lock); wait only for a header still being written.
                size = os.fstat(self._fd).st_size
                if size >= HEADER_SIZE:
                    self._open_unlocked(size)
                    return
                self._lock.acquire()
            try:
                size = os.fstat(self._fd).st_size
                if 0 < size < HEADER_SIZE and is_header_prefix(os.pread(self._fd, size, 0)):
                    # A writer killed while it created the file: no message, only the start
                    # of a header. Write the header anew, as for a new file.
                    os.ftruncate(self._fd, 0)
                    size = 0
                if size == 0:
                    remove_tip(self.path)  # a record left beside a file of this name is not its
                    self.header = Header(
                        os.path.basename(self.path) if file_name is None else file_name,
                        now_ms() if created_at_ms is None else created_at_ms,
                        beacon_interval,
                    )
                    self._write_at(encode_header(self.header), 0)
                    self._created = self._unsynced = True
                    self._encoder = FrameEncoder(beacon_interval, HEADER_SIZE, path=self.path)
                    self._tip = TipFile(self._fd, self.path)
                else:
                    self.header = decode_header(os.pread(self._fd, HEADER_SIZE, 0), self.path)
                    self._encoder = self._new_encoder()
                    self._tip = TipFile(self._fd, self.path)
                    self._sync(size, opening=True)
                    self._record_tip(os.fstat(self._fd).st_size)  # spare the others a decode
            finally:
                self._lock.release()
        except BaseException:
            self._release()
            raise
        self._opened()

    def _open_unlocked(self, size: int) -> None:
        try:
            self.header = decode_header(os.pread(self._fd, HEADER_SIZE, 0), self.path)
            self._encoder = self._new_encoder()
            self._tip = TipFile(self._fd, self.path)
            self._catch_up_settled(size, opening=True)
        except BaseException:
            self._release()
            raise
        self._opened()

    def _opened(self) -> None:
        self._flushed = self._encoder.committed_offset
        self._use(contended=False)  # counting the file at open is not others appending
        self._encoder.beacon_now()

    def _new_encoder(self) -> FrameEncoder:
        return FrameEncoder(self.header.beacon_interval, HEADER_SIZE, path=self.path)

    # -- state -----------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """File offset where the next message goes (including bytes not yet flushed)."""
        return self._encoder.offset

    @property
    def beacon_interval(self) -> int:
        return self.header.beacon_interval

    def last_sequences(self) -> dict[tuple[str, int], int]:
        """The highest sequence number of every (key, shard) the file held when this writer last
        wrote or caught up with it, or that it has buffered since."""
        self._encode_pending()
        return {(state.key, state.shard): state.seq for state in self._encoder.streams()}

    def last_seq(self, key: str, shard: int = 0) -> int:
        """The highest sequence number of (key, shard), as :meth:`last_sequences`; 0 if none."""
        self._encode_pending()
        state = self._encoder.current(key, shard)
        return 0 if state is None else state.seq

    # -- buffering -------------------------------------------------------------------------------

    def append(
        self, key: str, payload: bytes, timestamp_ms: int | None = None
    ) -> tuple[int, int, int]:
        """Buffer the next message of ``key`` (shard 0); returns (seq, timestamp_ms, offset).

        The sequence number is the stream's last plus one; the timestamp defaults to now.
        :meth:`flush` makes it visible to followers. If another writer appends to the file
        before that, the flush numbers this message after theirs, so the seq and offset
        returned here are final only for a file nobody else writes: use :meth:`publish` for
        final ones.
        """
        if self._closed:
            raise WriterClosedError("append to a closed writer", path=self.path)
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        seq, offset = self._encode(key, payload, timestamp_ms)
        if self._encoder.offset - self._flushed >= AUTO_FLUSH_BYTES:
            self.flush()
        return seq, timestamp_ms, offset

    def _use(self, *, contended: bool) -> None:
        """Encode on append (alone), or buffer unencoded (while others keep appending)."""
        self._contended = contended
        self._encode = self._defer if contended else self._encoder.append

    def _defer(self, key: str, payload: bytes, timestamp_ms: int) -> tuple[int, int]:
        """Buffer a message's frame with a provisional seq, to be numbered under the lock (see
        :meth:`FrameEncoder.append_frames`); its provisional numbers (the offset leaves beacons
        out). The frame is built here, outside the lock: what the lock then holds for is little
        more than the numbering."""
        if not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            raise TimestampRangeError(
                f"timestamp {timestamp_ms} ms outside 0..{MAX_TIMESTAMP_MS}", path=self.path
            )
        size = len(payload)
        if size > MAX_PAYLOAD_BYTES:
            raise StreamFormatError(f"payload of {size} bytes exceeds 4 GiB", path=self.path)
        last = self._pending_seqs.get(key)
        if last is None:
            state = self._encoder.current(key)
            if state is None:
                # A new key: refuse it now, not in the middle of the flush.
                last = self._pending_seqs[key] = [0, encode_key(key)]
            else:
                last = self._pending_seqs[key] = [state.seq, state.prefix]
        seq = last[0] = last[0] + 1
        frame = b"".join((last[1], _pack_fixed(0, seq, timestamp_ms, size), payload,
                          _pack_tail(crc16(payload), 13)))  # fmt: skip
        self._pending.append((key, seq, timestamp_ms, frame))
        offset = self._encoder.offset + self._pending_bytes
        self._pending_bytes += len(frame)
        if self._pending_bytes >= AUTO_FLUSH_BYTES:
            self.flush()
        return seq, offset

    def _encode_pending(self) -> None:
        """Encode the messages buffered unencoded (before anything buffered after them)."""
        pending = self._pending
        if not pending:
            return
        self._pending, self._pending_seqs, self._pending_bytes = [], {}, 0
        encoder = self._encoder
        encoder.beacon_now()
        encoder.append_frames(pending)

    def write_message(
        self, key: str, shard: int, seq: int, timestamp_ms: int, payload: bytes
    ) -> int:
        """Buffer a message with the exact shard and sequence number given (fixtures, tools).

        Returns its offset (final as :meth:`append`'s). Beacons record the highest sequence
        number seen per stream.
        """
        if self._closed:
            raise WriterClosedError("write to a closed writer", path=self.path)
        self._encode_pending()
        offset = self._encoder.write(key, shard, seq, timestamp_ms, payload)
        if self._encoder.offset - self._flushed >= AUTO_FLUSH_BYTES:
            self.flush()
        return offset

    def write_eos(self, timestamp_ms: int | None = None) -> int:
        """Buffer the end-of-stream message; returns its offset."""
        if self._closed:
            raise WriterClosedError("write to a closed writer", path=self.path)
        self._encode_pending()
        return self._encoder.write_eos(now_ms() if timestamp_ms is None else timestamp_ms)

    @property
    def buffered(self) -> bool:
        """Whether messages wait for :meth:`flush`."""
        return bool(self._pending) or self._encoder.buffered

    # -- writing out (under the lock) ------------------------------------------------------------

    def flush(self) -> None:
        """Write out everything buffered, so followers see it, and sync it as ``durability``
        says (with ``"publish"``, it is on disk when this returns).

        Waits (blocking this thread) while another writer appends. If the write itself fails,
        what was buffered is dropped (part of it may have reached the file).
        """
        if self._closed:
            raise WriterClosedError("flush of a closed writer", path=self.path)
        if self._pending or self._exclusive is not None:
            self._prepare()
        elif self._encoder.buffered:
            self._others_appended = False  # encoded already: nothing to count before the lock
        else:
            return
        self._acquire()
        try:
            self._flush_locked()
        finally:
            self._lock.release()
        self._synced_if_due()

    async def aflush(self) -> None:
        """As :meth:`flush`, waiting for the lock and syncing in worker threads (cancellable
        while it waits for the lock: a cancelled call wrote nothing, and what was buffered
        stays buffered; once written, the sync completes, shielded)."""
        if self._closed:
            raise WriterClosedError("flush of a closed writer", path=self.path)
        if not self.buffered:
            await trio.lowlevel.checkpoint()
            return
        self._prepare()
        await self._acquire_async()
        try:
            self._flush_locked()
        finally:
            self._lock.release()
        await self._asynced_if_due()

    def publish(self, key: str, payload: bytes, timestamp_ms: int | None = None) -> Receipt:
        """Append one message of ``key`` and write it out now, with anything buffered before it;
        returns its final :class:`Receipt` (with ``durability="publish"``, once the message is
        on disk). Blocks this thread while another writer appends, and while it syncs."""
        return self.publish_many([(key, payload, timestamp_ms)])[0]

    def publish_many(self, items: Iterable[Item]) -> list[Receipt]:
        """Append ``(key, payload, timestamp_ms or None)`` items and write them out now, in one
        append under the lock; returns their final receipts. A bad item (key, timestamp, size)
        raises before anything is written. One sync for the batch, as ``durability`` says."""
        checked = self._check(items)
        self._prepare()
        self._acquire()
        try:
            receipts = self._publish_locked(checked)
        finally:
            self._lock.release()
        self._synced_if_due()
        return receipts

    async def apublish(self, key: str, payload: bytes, timestamp_ms: int | None = None) -> Receipt:
        """As :meth:`publish`, waiting for the lock and syncing in worker threads. Cancellable
        while it waits for the lock; a cancelled call appended nothing. Once written, the sync
        completes (shielded) and the receipt is returned."""
        item = self._check_one(key, payload, timestamp_ms)
        self._prepare()
        await self._acquire_async()
        try:
            receipt = self._publish_locked([item])[0]
        finally:
            self._lock.release()
        await self._asynced_if_due()
        return receipt

    async def apublish_many(self, items: Iterable[Item]) -> list[Receipt]:
        """As :meth:`publish_many`, waiting for the lock and syncing in worker threads
        (cancellable while it waits for the lock; a cancelled call appended nothing)."""
        checked = self._check(items)
        self._prepare()
        await self._acquire_async()
        try:
            receipts = self._publish_locked(checked)
        finally:
            self._lock.release()
        await self._asynced_if_due()
        return receipts

    def _check(self, items: Iterable[Item]) -> list[tuple[str, bytes, int]]:
        return [self._check_one(key, payload, ts) for key, payload, ts in items]

    def _check_one(
        self, key: str, payload: bytes, timestamp_ms: int | None
    ) -> tuple[str, bytes, int]:
        """What the format refuses, refused before anything is written."""
        if self._closed:
            raise WriterClosedError("publish to a closed writer", path=self.path)
        if self._encoder.current(key) is None:
            encode_key(key)  # a key the file holds is valid
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise StreamFormatError(
                f"payload of {len(payload)} bytes exceeds 4 GiB", path=self.path
            )
        if timestamp_ms is None:
            timestamp_ms = time.time_ns() // 1_000_000
        elif not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            raise TimestampRangeError(
                f"timestamp {timestamp_ms} ms outside 0..{MAX_TIMESTAMP_MS}", path=self.path
            )
        return key, payload, timestamp_ms

    def _acquire(self) -> None:
        if self._exclusive is None:
            self._lock.acquire()

    async def _acquire_async(self) -> None:
        if self._exclusive is None:
            await self._lock.acquire_async()
        else:
            await trio.lowlevel.checkpoint_if_cancelled()

    def _prepare(self) -> None:
        """Before taking the lock: count what others finished appending since this writer last
        wrote (without the lock; nothing else if a batch is encoded already)."""
        self._others_appended = False
        encoder = self._encoder
        if not self._contended or self._exclusive is not None or encoder.buffered:
            return  # alone (the catch-up under the lock notices others) or encoded already
        size = os.fstat(self._fd).st_size
        if size > encoder.committed_offset:
            # Buffer unencoded from now on (what is buffered already stays before it).
            self._others_appended = True
            self._use(contended=True)
            self._catch_up_settled(size)
            self._flushed = encoder.committed_offset
            encoder.beacon_now()

    def _catch_up_settled(self, size: int, *, opening: bool = False) -> None:
        """Without the lock: adopt the tip record if it describes the file at ``size`` bytes,
        else count what other writers finished appending (no batch held) — unless the others
        kept records lately: the appends under way then leave one, read under the lock.
        Opening always decodes: it checks the whole file once."""
        encoder = self._encoder
        if self._tip is not None and not opening:
            tip = self._tip.read(size, known=encoder.committed_offset)
            if tip is not None:
                encoder.adopt(tip)  # the position precedes what a next append overwrites
                self.tips_adopted += 1
                if tip.size == size:
                    return
            if time.monotonic() < self._tips_flowing_until:
                return  # the others record the tip: the one after their append will do
        done = catch_up(self._fd, encoder, size, path=self.path, settled=True)
        self.decoded_to_catch_up += done.messages

    def _publish_locked(self, items: list[tuple[str, bytes, int]]) -> list[Receipt]:
        self._sync(self._stat())
        self._encode_pending()
        self._encoder.beacon_now()
        append = self._encoder.append
        receipts = []
        for key, payload, ts in items:
            seq, offset = append(key, payload, ts)
            receipts.append(Receipt(key, seq, ts, offset))
        self._written(self._write_out())
        return receipts

    def _flush_locked(self) -> None:
        self._sync(self._stat())
        self._encode_pending()
        self._written(self._write_out())

    def _written(self, written: int) -> None:
        """After a write-out (lock held): record the tip if others appended lately (they will
        read it), if much was written since the last record, or at close; then settle the
        mode."""
        if written:
            self._untipped += written
            if self._others_appended:
                self._tip_always_until = time.monotonic() + TIP_WINDOW
                self._record_tip(self._encoder.committed_offset)
            elif (
                self._closing
                or self._untipped >= TIP_EVERY_BYTES
                or (self._tip_always_until and time.monotonic() < self._tip_always_until)
            ):
                self._record_tip(self._encoder.committed_offset)
        self._settle_mode()

    def _record_tip(self, size: int) -> None:
        """Record the tip of the file, ``size`` bytes long, all of it counted (lock held)."""
        encoder, tip_file = self._encoder, self._tip
        if tip_file is None or not tip_file.enabled or encoder.buffered:
            return  # (a beacon due where the file ends waits in the encoder: not the tip yet)
        if size != encoder.committed_offset and self._overwrite_at != encoder.committed_offset:
            return  # the encoder does not stand at the file's end: nothing to tell
        tip = encoder.tip(size)
        if tip is not None:
            tip_file.write(tip)
            self._untipped = 0

    def _settle_mode(self) -> None:
        """After a write: encode on append again if nobody else appended during this flush.

        Only here, with nothing buffered unencoded, may the writer go back to encoding on
        append (what it buffers unencoded must come after what it encoded)."""
        if self._contended is not self._others_appended:
            self._use(contended=self._others_appended)

    def _stat(self) -> int:
        st = os.fstat(self._fd)
        if st.st_nlink == 0:
            self._encoder.discard()  # nothing can reach a removed file
            raise FileRemovedError("stream file was removed from disk", path=self.path)
        return st.st_size

    def _sync(self, size: int, *, opening: bool = False) -> None:
        """Catch up with what other writers appended since this one last wrote (lock held):
        adopt the tip record if it describes the file, else decode. Opening always decodes:
        it checks the whole file once."""
        encoder = self._encoder
        if size == encoder.committed_offset:
            return
        self._others_appended = True
        self._use(contended=True)
        batch = encoder.rollback()
        try:
            known = encoder.committed_offset
            tip = None if self._tip is None or opening else self._tip.read(size, known=known)
            if tip is not None:
                encoder.adopt(tip)
                self.tips_adopted += 1
                self._tips_flowing_until = time.monotonic() + TIP_WINDOW
                if tip.size == size:
                    self._overwrite_at = tip.overwrite_at
                    return
                # A record of a shorter file: decode only what follows it.
            elif size < encoder.committed_offset:
                # The file was cut shorter (a repair): count it again from the start.
                self._encoder = encoder = self._new_encoder()
            done = catch_up(self._fd, encoder, size, path=self.path)
            self._overwrite_at = done.overwrite_at
            self.decoded_to_catch_up += done.messages
        finally:
            self._flushed = encoder.committed_offset
            self._use(contended=True)  # the encoder may be a new one
            encoder.replay(batch)

    def _write_out(self) -> int:
        """Write the encoded batch; returns how many bytes."""
        encoder = self._encoder
        data = encoder.take()
        if not data:
            return 0
        try:
            if self._overwrite_at is not None:
                os.ftruncate(self._fd, self._overwrite_at)
                self._overwrite_at = None
            self._unsynced = True  # even a write that fails may have reached the file
            self._write_at(data, encoder.committed_offset)
        except BaseException:
            encoder.discard()
            raise
        encoder.commit()
        self._flushed = encoder.committed_offset
        return len(data)

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

    # -- syncing (see :mod:`.durability`) --------------------------------------------------------

    def require(self, durability: Durability, sync_interval: float | None = None) -> None:
        """Keep at least this promise too: the writer takes the stronger setting of its own and
        this one (``"publish"`` over ``"interval"`` over ``"close"``, the shorter interval).
        Publishers of one file in one process share a writer, and none gets less than it
        asked for."""
        wanted = check_durability(durability, sync_interval)
        self.durability, self.sync_interval = stronger(
            (self.durability, self.sync_interval), wanted
        )

    def _due(self) -> bool:
        """Whether what was just written out is to be synced now (see ``durability``)."""
        if not self._unsynced or self.durability == "close":
            return False
        if self.durability == "publish":
            return True
        if not self._keepers:
            return time.monotonic() - self._last_sync >= self.sync_interval
        dirty = self._dirty
        if dirty is not None:
            dirty.set()  # keep_synced syncs it within the interval
        return False

    def _synced_if_due(self) -> None:
        if self._due():
            self.fsync()

    async def _asynced_if_due(self) -> None:
        if self._due():
            with trio.CancelScope(shield=True):  # written: the receipt waits for the disk
                await self.afsync()

    def fsync(self) -> None:
        """Make everything written out so far durable now (blocking; see :mod:`.durability`),
        whatever the setting; raises :class:`~trio_streams.file.errors.StreamFileError` if the
        system cannot (what was written may then be lost by a power loss)."""
        if self._closed:
            raise WriterClosedError("sync of a closed writer", path=self.path)
        started = self._sync_begins()
        try:
            sync_data(self._fd)
            if self._created:
                sync_directory(self.path)
        except OSError as exc:
            self._sync_failed(exc)
        self._sync_done(started)

    async def afsync(self) -> None:
        """As :meth:`fsync`, in a worker thread. Not cancellable while the sync runs (the thread
        is waited for), so the descriptor outlives it."""
        if self._closed:
            raise WriterClosedError("sync of a closed writer", path=self.path)
        started = self._sync_begins()
        fd, created = self._fd, self._created
        try:
            await trio.to_thread.run_sync(sync_data, fd)
            if created:
                await trio.to_thread.run_sync(sync_directory, self.path)
        except OSError as exc:
            self._sync_failed(exc)
        self._sync_done(started)

    def _sync_begins(self) -> float:
        # Writes from here on may miss this sync: they leave the writer unsynced again.
        self._unsynced = False
        return time.monotonic()

    def _sync_done(self, started: float) -> None:
        self._last_sync = started
        self._created = False

    def _sync_failed(self, exc: OSError) -> None:
        self._unsynced = True
        raise StreamFileError(f"sync to disk failed: {exc}", path=self.path) from exc

    async def keep_synced(self) -> None:
        """Sync what is written out at most :attr:`sync_interval` seconds after it, until
        cancelled; run it in a nursery that the writer outlives (cancel it before closing).

        While it runs, publishing never waits for a sync. It waits on an event while everything
        is synced (never polls), then sleeps the interval and syncs in a worker thread (a write
        made during that sync is synced one interval later). Cancellation ends it at once,
        except during a sync, which it lets finish. With a ``durability`` other than
        ``"interval"`` it has nothing to do (``"publish"`` syncs every write-out) but wait."""
        self._keepers += 1
        try:
            while not self._closed:
                if not self._unsynced or self.durability != "interval":
                    dirty = self._dirty
                    if dirty is None or dirty.is_set():
                        self._dirty = dirty = trio.Event()
                    await dirty.wait()
                    continue
                await trio.sleep(self.sync_interval)
                if self._unsynced and not self._closed:
                    await self.afsync()
        finally:
            self._keepers -= 1

    # -- closing ---------------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self, *, eos: bool = False, eos_timestamp_ms: int | None = None) -> None:
        """Optionally write end-of-stream, flush, sync what this writer wrote and not yet synced,
        and close (blocking)."""
        if self._closed:
            return
        try:
            if eos:
                self.write_eos(eos_timestamp_ms)
            if self.buffered:
                self._closing = True  # the last write-out records the tip for later writers
                self.flush()
            if self._unsynced:
                self.fsync()
        finally:
            self._release()

    async def aclose(self, *, eos: bool = False, eos_timestamp_ms: int | None = None) -> None:
        """As :meth:`close`, waiting for the lock and fsyncing in worker threads; always
        completes (shielded)."""
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        with trio.CancelScope(shield=True):
            try:
                if eos:
                    self.write_eos(eos_timestamp_ms)
                if self.buffered:
                    self._closing = True  # the last write-out records the tip
                    await self.aflush()
                if self._unsynced:
                    await self.afsync()
            finally:
                self._release()

    def _release(self) -> None:
        self._closed = True
        self._lock.release()
        if self._tip is not None:
            self._tip.close()
        exclusive, self._exclusive = self._exclusive, None
        if exclusive is not None:
            os.close(exclusive)
        fd, self._fd = self._fd, -1
        if fd >= 0:
            os.close(fd)

    def __enter__(self) -> StreamWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class WriterHandle:
    """One publisher's share of a :class:`StreamWriter`; close it once when done (``with``,
    ``async with``, :meth:`close` or :meth:`aclose`).

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

    async def keep_synced(self) -> None:
        """See :meth:`StreamWriter.keep_synced` (cancel it before closing the last share)."""
        await self.writer.keep_synced()

    async def apublish(self, key: str, payload: bytes, timestamp_ms: int | None = None) -> Receipt:
        """See :meth:`StreamWriter.apublish`."""
        if self._closed:
            raise WriterClosedError("publish through a closed handle", path=self.path)
        return await self.writer.apublish(key, payload, timestamp_ms)

    async def apublish_many(self, items: Iterable[Item]) -> list[Receipt]:
        """See :meth:`StreamWriter.apublish_many`."""
        if self._closed:
            raise WriterClosedError("publish through a closed handle", path=self.path)
        return await self.writer.apublish_many(items)

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

    async def __aenter__(self) -> WriterHandle:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


@dataclass
class WriterRegistry:
    """One :class:`StreamWriter` per resolved path in this process, shared by reference count."""

    _writers: dict[str, StreamWriter] = field(default_factory=dict)
    _refs: dict[str, int] = field(default_factory=dict)
    _eos: dict[str, bool] = field(default_factory=dict)

    def acquire(self, path: str | os.PathLike[str], **options: Any) -> WriterHandle:
        """A handle on the writer of ``path``, opening it (with ``options``) if it is not open.

        ``options`` are :class:`StreamWriter`'s keyword arguments; they are ignored when the
        writer is already open, except ``durability`` and ``sync_interval``: the writer keeps
        the stronger promise of its own and these (:meth:`StreamWriter.require`).
        """
        key = os.path.realpath(path)
        writer = self._writers.get(key)
        if writer is None:
            writer = StreamWriter(key, **options)
            self._writers[key] = writer
            self._refs[key] = 0
        elif "durability" in options:
            writer.require(options["durability"], options.get("sync_interval"))
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
