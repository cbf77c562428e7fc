"""The I/O layer of the reader over one open file: batches of messages, rewinds and seeks.

:class:`FileReader` feeds a :class:`~trio_streams.file.decoder.FrameDecoder` with ``pread`` from
the page cache, a chunk at a time. Its calls are synchronous and short: one chunk read per call
at most beyond what is buffered, which is what lets a Trio source call them inline without a
thread hop, and lets the CLI use the same class. Seeks are written as step generators that yield
after every chunk or every few beacon probes, so an async caller can checkpoint between bounded
steps while the synchronous caller just runs them out.

Live and finished files differ only at the tail: :meth:`FileReader.read_messages` never raises
for a frame cut by the end of the bytes read (on a live file it is "not written yet", and those
bytes are read again next time, since a reopening writer may rewrite them);
:meth:`FileReader.check_finished` raises :class:`~trio_streams.file.errors.TruncatedError` when
the file is finished.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Collection, Generator, Iterator, Mapping
from typing import NoReturn

from ..core.positions import Position, PositionKind
from .decoder import EosPolicy, FrameDecoder
from .errors import (
    SeekError,
    SeekOutOfRangeError,
    StreamFileNotFoundError,
    StreamFormatError,
    TruncatedError,
    UnprovenTailError,
)
from .format import (
    HEADER_SIZE,
    INTERNAL_KEY,
    MAX_TIMESTAMP_MS,
    MAX_U64,
    Beacon,
    Header,
    Message,
    decode_beacon,
    decode_header,
    markers_per_beacon,
    max_markers,
)
from .survey import Survey, target_value

#: Bytes read from the file per call: large enough to amortise the syscall, small enough to keep
#: a read (and so the time between two checkpoints of an async caller) short.
READ_CHUNK = 256 * 1024
#: Bytes a seek reads first after the bracketing beacon (at least two pages are read).
_FIRST_SCAN_CHUNK = 16 * 1024
#: Bytes a seek reads of a beacon first: room for the markers of a dozen short keys. A beacon
#: that needs more is read again in full (at most :func:`max_beacon_bytes`).
_FIRST_BEACON_BYTES = 512
#: Beacon probes between two yields of a seek.
_PROBES_PER_STEP = 32

SeekSteps = Generator[None, None, int]


def max_beacon_bytes(beacon_interval: int) -> int:
    """The most bytes a beacon can take at this interval (markers are capped per beacon)."""
    return min(beacon_interval, 7 + max(max_markers(beacon_interval), 1) * 282)


def run_steps(steps: SeekSteps) -> int:
    """Run a step generator to completion and return its result."""
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return int(done.value)


class FileReader:
    """Reads messages of ``keys`` (None: all but internal) from the stream file at ``path``.

    ``on_eos`` says what an end-of-stream message does (see
    :data:`~trio_streams.file.decoder.EosPolicy`): ``stop`` for a replay, ``hold`` for a live
    follower. ``start`` is ``beginning`` (offset 128) or ``end`` (after the last complete message).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        keys: Collection[str] | None = None,
        internal: bool = False,
        on_eos: EosPolicy = "stop",
        start: Position | None = None,
    ) -> None:
        self.path = os.fspath(path)
        try:
            self._fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise StreamFileNotFoundError("no such stream file", path=self.path) from None
        except OSError as exc:
            raise StreamFileNotFoundError(f"cannot open: {exc.strerror}", path=self.path) from exc
        if stat.S_ISDIR(os.fstat(self._fd).st_mode):
            os.close(self._fd)
            raise StreamFileNotFoundError("is a directory, not a stream file", path=self.path)
        try:
            self.header: Header = decode_header(os.pread(self._fd, HEADER_SIZE, 0), self.path)
        except BaseException:
            os.close(self._fd)
            raise
        self.beacon_interval = self.header.beacon_interval
        self.keys = None if keys is None else frozenset(keys)
        self._internal = internal
        self._on_eos = on_eos
        self._live = on_eos == "hold"
        #: Whether the last read found no more bytes in the file.
        self.at_eof = False
        #: Largest file offset read so far: growth beyond it means new data.
        self.known_size = HEADER_SIZE
        #: (offset, file size) of the last tail :meth:`check_stalled_tail` found plausible.
        self._tail_checked = (0, 0)
        #: What the last tip scan learnt: each stream's last sequence number before the tip, and
        #: whether that names every stream (the scan read the whole file).
        self._tip_known: tuple[dict[tuple[str, int], int], bool] = ({}, True)
        self._decoder = self._decoder_at(HEADER_SIZE)
        if start is not None and start.kind is PositionKind.END:
            self._decoder = self._decoder_at(self._find_tip(), *self._tip_known)

    # -- reading ---------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """File offset of the next message (or beacon) to decode."""
        return self._decoder.offset

    @property
    def eos(self) -> Message | None:
        """The end-of-stream message that ended this reader's stream, if it reached one.

        A live reader (``on_eos="hold"``) parked before an EOS at the tip has not reached it: a
        writer reopening the file overwrites it. Only an EOS with more written after it, which
        stays in the file, ends a live reader's stream.
        """
        return self._decoder.eos

    @property
    def decoder(self) -> FrameDecoder:
        return self._decoder

    def read_messages(self, max_n: int) -> list[Message]:
        """Up to ``max_n`` messages from the buffer and, if that is short, one more chunk read.

        Returns fewer (maybe none) at the end of what the file holds now. A corrupt frame raises
        its typed error, after the messages before it have been returned.

        A live reader that meets an end-of-stream message looks at the file again from it,
        because the bytes it holds may predate a writer that reopened the file and overwrote it:
        still there with more written after it, the message stays and ends the stream; still
        there and last, the reader is at the tip (it reports the end of the file and reads it
        again once the file changes); gone, the reader reads on with what replaced it.
        """
        decoder = self._decoder
        out = decoder.next_messages(max_n)
        if len(out) >= max_n or decoder.eos is not None:
            return out
        try:
            while len(out) < max_n and decoder.eos is None:
                if decoder.held_eos is not None:
                    state = self._held_eos_state()
                    if state == "stays":
                        decoder.end_at_held_eos()
                        break
                    decoder.discard_pending()  # read again from where the EOS is (or was)
                    if state == "tip":
                        self.at_eof = True
                        break
                at = decoder.fed_end
                data = os.pread(self._fd, READ_CHUNK, at)
                if not data:
                    self.at_eof = True
                    break
                self.at_eof = False
                if at + len(data) > self.known_size:
                    self.known_size = at + len(data)
                decoder.feed(data)
                out.extend(decoder.next_messages(max_n - len(out)))
                if (
                    len(data) < READ_CHUNK
                    and len(out) < max_n
                    and decoder.eos is None
                    and decoder.held_eos is None
                ):
                    # A short read of a regular file ended at its end, and every whole message
                    # it brought was taken: the read that would come next finds nothing (unless
                    # the file grew in between, which a follower's wait looks for anyway).
                    self.at_eof = True
                    break
        except StreamFormatError:
            if not out:
                raise
            return out
        if self._live and len(out) < max_n and decoder.pending:
            # Bytes of a frame still being written: read them again, from the file, once it
            # changes (a writer that finishes or, after a crash, rewrites the frame may change
            # them). Until then the reader is at the end of what the file holds, so its
            # follower waits instead of reading them again.
            decoder.discard_pending()
            self.at_eof = True
        return out

    def _held_eos_state(self) -> str:
        """Where the end-of-stream message the decoder holds stands in the file now: ``stays``
        (unchanged, more written after it), ``tip`` (unchanged and last) or ``gone``."""
        decoder = self._decoder
        held = decoder.held_eos
        assert held is not None
        expected = decoder.held_eos_bytes
        # One read covers the message and what follows it, so it sees the file of one moment: a
        # writer overwriting it truncates to its offset before writing there.
        now = os.pread(self._fd, len(expected) + 1, held.offset)
        if now[: len(expected)] != expected:
            return "gone"
        end = held.offset + len(expected)
        self.known_size = max(self.known_size, end)
        return "stays" if len(now) > len(expected) else "tip"

    def check_finished(self) -> None:
        """For a finished file: raise :class:`TruncatedError` if the last frame is cut short.

        A frame is cut short at the end also while another process is appending it (writers
        hold the file's lock for each append, readers never wait for it): then the file is
        not finished, and what was read is all there is yet, with no error. Told apart by
        the lock: held by a writer (a shared lock cannot be had at once), or the file grew
        past what was read meanwhile, it is an append in progress."""
        if not self.at_eof:
            return
        try:
            self._decoder.check_finished()
        except TruncatedError:
            if self._being_appended():
                return
            raise

    def check_stalled_tail(self) -> None:
        """Live: raise :class:`~trio_streams.file.errors.UnprovenTailError` if the bytes after
        the last complete frame cannot be a frame still being written or cut by a crash.

        A live reader waits at a frame that runs past the end of the file: a writer is
        appending it, or crashed while it did (the next writer cuts it away). A damaged size
        field in the middle of a file looks the same, except that what follows holds complete
        frames: this is the check a writer reopening the file makes (see
        :func:`~trio_streams.file.repair.check_cut_tail`). It is skipped while a writer holds
        the file's lock, and for bytes already found plausible (the same offset and size)."""
        start = self._decoder.offset
        size = self.file_size()
        if size <= start or (start, size) == self._tail_checked or self._being_appended():
            return
        from .repair import check_cut_tail  # repair reads files with this module

        decoder = self._decoder
        probe = FrameDecoder(
            self.beacon_interval, start, internal=True, on_eos="include", path=self.path
        )
        probe.feed(os.pread(self._fd, size - start, start))
        if probe.next_messages(1):
            return  # a whole frame: an end-of-stream message at the tip, or new data
        streams = {key: (seq, MAX_TIMESTAMP_MS) for key, seq in decoder.known_streams().items()}
        try:
            check_cut_tail(
                lambda offset, n: os.pread(self._fd, n, offset),
                self.beacon_interval,
                start,
                size,
                path=self.path,
                streams=streams,
            )
        except UnprovenTailError as exc:
            # A reader that started mid-file does not know every stream a beacon may name.
            if decoder.whole_file or "marker" not in exc.why:
                raise
        self._tail_checked = (start, size)

    def _being_appended(self) -> bool:
        try:
            fcntl.flock(self._fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True  # a writer holds the lock: its append is under way
        try:
            return os.fstat(self._fd).st_size > self.known_size  # it finished meanwhile
        finally:
            fcntl.flock(self._fd, fcntl.LOCK_UN)

    def __iter__(self) -> Iterator[Message]:
        """Every message to the end of a finished file (raising if it ends inside a frame)."""
        while True:
            batch = self.read_messages(4096)
            if not batch:
                if self._decoder.eos is None and not self.at_eof:
                    continue
                self.check_finished()
                return
            yield from batch

    def file_size(self) -> int:
        return os.fstat(self._fd).st_size

    def stat(self) -> os.stat_result:
        """The open file's status: its size and link count (0 once removed) in one call."""
        return os.fstat(self._fd)

    def removed(self) -> bool:
        """Whether the file has been unlinked from the directory while open."""
        return os.fstat(self._fd).st_nlink == 0

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> FileReader:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- moving ----------------------------------------------------------------------------------

    def seek(self, position: Position, *, key: str | None = None, shard: int | None = None) -> int:
        """Move to ``position`` (see :meth:`seek_steps`) and return the offset landed on."""
        return run_steps(self.seek_steps(position, key=key, shard=shard))

    def seek_steps(
        self, position: Position, *, key: str | None = None, shard: int | None = None
    ) -> SeekSteps:
        """Move to ``position`` in bounded steps; the generator returns the new offset.

        Beginning and end move straight there. A sequence number lands on the first message of
        stream ``key``, in file order, with seq ≥ n, a timestamp on the first one strictly later;
        ``shard`` None means a message in any shard of the key, an int exactly that shard. The
        message is found by surveying beacons (see :mod:`~trio_streams.file.survey`, which also
        says when "any shard" is exact), rewinding to the bracketing beacon and reading forward
        through messages of that stream only; at an interval too small for any marker there is
        nothing to survey and the reading starts at the first message.

        A sequence number up to one past the stream's last (the next the file will write; a
        stream without messages has last 0, so 0 and 1) lands at the end when no message at or
        after it exists. Anything further raises :class:`SeekOutOfRangeError`, which states the
        stream's real last sequence number or that it has no messages in this file, and the
        reader is exactly where it was: the new position is only committed when the seek
        succeeds.
        """
        if position.kind is PositionKind.BEGINNING:
            self._commit(HEADER_SIZE)
            return HEADER_SIZE
        if position.kind is PositionKind.END:
            tip = self._find_tip()
            self._commit(tip, *self._tip_known)
            return tip
        key = self._seek_key(key, position)
        if shard is not None and not 0 <= shard <= MAX_U64:
            raise SeekError(f"shard {shard} is outside 0..2**64-1", path=self.path)
        target = target_value(position)
        size = self.file_size()
        left, last_seq = yield from self._survey_steps(position, key, shard, size)
        start = self._align(left * self.beacon_interval if left else HEADER_SIZE, size)
        other_shards: set[int] = set()
        if start is not None:
            landed, last_seq = yield from self._scan_steps(
                position, target, key, shard, left, start, size, last_seq, other_shards
            )
            if landed is not None:
                return landed
        if position.kind is PositionKind.SEQUENCE and target <= (last_seq or 0) + 1:
            tip = self._find_tip()
            self._commit(tip, *self._tip_known)
            return tip
        # With no message of (key, shard) no beacon is left of anything: the scan above read
        # the whole file, so other_shards is every shard the key has.
        self._refuse(position, key, shard, last_seq, other_shards)

    def _survey_steps(
        self, position: Position, key: str, shard: int | None, size: int
    ) -> Generator[None, None, tuple[int, int | None]]:
        """Survey the beacons for the one that brackets ``position`` (see :meth:`seek_steps`);
        returns its index (0: read from the first message) and the highest seq of the stream it
        records (None: no message of it seen)."""
        interval = self.beacon_interval
        # Below 571 bytes writers put no marker in beacons: there is nothing to survey (reading
        # them would cost a probe per beacon and rule nothing out).
        if not markers_per_beacon(interval):
            return 0, None
        survey = Survey(position, key, shard, size // interval)
        while (index := survey.next_probe()) is not None:
            survey.observe(index, self.read_beacon(index))
            if survey.probes % _PROBES_PER_STEP == 0:
                yield
        return survey.left, None if survey.left_marker is None else survey.left_marker[0]

    def _scan_steps(
        self,
        position: Position,
        target: int,
        key: str,
        shard: int | None,
        left: int,
        start: int,
        size: int,
        last_seq: int | None,
        other_shards: set[int],
    ) -> Generator[None, None, tuple[int | None, int | None]]:
        """Read forward from ``start`` (at or after beacon ``left``) through the messages of
        ``key`` for the first one at ``position``, and commit to it: returns its offset (None:
        there is none) and the highest seq of the stream seen, ``last_seq`` included; the shards
        of the key other than ``shard`` passed on the way go into ``other_shards``."""
        by_seq = position.kind is PositionKind.SEQUENCE
        interval = self.beacon_interval
        # An end-of-stream message on the way does not stop the search: it ends a reader that
        # reads through it, but a position after it is where the seek lands.
        markers = self._beacon_markers(left) if left and start > HEADER_SIZE else {}
        scan = FrameDecoder(
            interval, start, keys=(key,), on_eos="include", path=self.path, known=markers
        )
        at = start
        # The target is usually within a page of the bracketing beacon: read a little first,
        # then more and more, so a seek decodes about a page, a scan whole chunks.
        chunk = min(READ_CHUNK, max(_FIRST_SCAN_CHUNK, 2 * interval))
        while True:
            batch_at, before = scan.offset, scan.known_streams()
            batch = scan.next_messages(256)
            for message in batch:
                if shard is not None and message.shard != shard:
                    other_shards.add(message.shard)
                    continue
                if (message.seq >= target) if by_seq else (message.timestamp_ms > target):
                    # What a reader starting here must know to check its first frame.
                    known = self._streams_between(batch_at, message.offset, before)
                    self._commit(message.offset, known, scan.whole_file)
                    return message.offset, last_seq
                if last_seq is None or message.seq > last_seq:
                    last_seq = message.seq
            if batch:
                continue
            if scan.eos is not None or at >= size:
                return None, last_seq
            data = os.pread(self._fd, min(chunk, size - at), at)
            if not data:
                return None, last_seq
            scan.feed(data)
            at += len(data)
            chunk = min(READ_CHUNK, 2 * chunk)
            yield

    def read_beacon(self, index: int) -> Beacon | None:
        """The beacon at byte ``index``·interval (``index`` ≥ 1); None if it is not whole yet.

        One ``pread`` of a few hundred bytes, two for a beacon with many markers or long keys."""
        at = index * self.beacon_interval
        beacon_bytes = max_beacon_bytes(self.beacon_interval)
        first_bytes = min(beacon_bytes, _FIRST_BEACON_BYTES)
        data = os.pread(self._fd, first_bytes, at)
        parsed = decode_beacon(data, 0, at, self.path)
        if parsed is None and len(data) == first_bytes < beacon_bytes:
            data = os.pread(self._fd, beacon_bytes, at)  # many markers, or long keys
            parsed = decode_beacon(data, 0, at, self.path)
        return None if parsed is None else parsed[0]

    def _refuse(
        self,
        position: Position,
        key: str,
        shard: int | None,
        last_seq: int | None,
        other_shards: Collection[int] = (),
    ) -> NoReturn:
        """Refuse a seek, saying what the file holds of the stream (``last_seq`` None: none)."""
        stream = f"stream {key!r}" + ("" if shard is None else f" (shard {shard})")
        if last_seq is not None:
            what = (
                f"sequence {position.value} is past the last sequence {last_seq} of {stream}"
                if position.kind is PositionKind.SEQUENCE
                else f"no message of {stream} is later than {position.value} ms"
            )
        else:
            what = (
                f"sequence {position.value} is past 1, the next sequence of {stream}, which has "
                "no messages in this file"
                if position.kind is PositionKind.SEQUENCE
                else f"no message of {stream} is later than {position.value} ms: it has no "
                "messages in this file"
            )
            if other_shards:
                plural = "s" if len(other_shards) > 1 else ""
                listed = ", ".join(str(s) for s in sorted(other_shards))
                what += f" (stream {key!r} has messages only in shard{plural} {listed})"
        raise SeekOutOfRangeError(f"seek refused: {what}", path=self.path)

    def _seek_key(self, key: str | None, position: Position) -> str:
        if key is None:
            key = position.stream
        if key is not None:
            return key
        if self.keys is not None and len(self.keys) == 1:
            return next(iter(self.keys))
        raise SeekError(
            f"seeking to {position!r} needs the stream key (this reader reads "
            f"{'every stream' if self.keys is None else sorted(self.keys)})",
            path=self.path,
        )

    def _decoder_at(
        self,
        offset: int,
        known: Mapping[tuple[str, int], int] | None = None,
        complete: bool = False,
    ) -> FrameDecoder:
        """A decoder starting at ``offset``, seeded with each stream's last sequence number
        before it (``known``; ``complete``: that names every stream), so the first frame it
        decodes is checked as any other is."""
        return FrameDecoder(
            self.beacon_interval,
            offset,
            keys=self.keys,
            internal=self._internal,
            on_eos=self._on_eos,
            path=self.path,
            known=known,
            complete=complete,
        )

    def rewind_to(self, offset: int) -> None:
        """Continue at ``offset``, a frame (or beacon) start the caller knows, e.g. where it
        wrote a message itself. Forgets an end-of-stream message it had stopped at."""
        self._commit(offset)

    def _commit(
        self,
        offset: int,
        known: Mapping[tuple[str, int], int] | None = None,
        complete: bool = False,
    ) -> None:
        self._decoder = self._decoder_at(offset, known, complete)
        self.at_eof = False

    def _align(self, start: int, size: int) -> int | None:
        """The first frame start at or after ``start``, stepping over beacons and the rest of a
        frame they split; None if that lies past ``size`` or a beacon there is incomplete."""
        interval = self.beacon_interval
        offset = start
        beacon_bytes = max_beacon_bytes(interval)
        while offset > 0 and offset % interval == 0:
            parsed = decode_beacon(os.pread(self._fd, beacon_bytes, offset), 0, offset, self.path)
            if parsed is None:
                return None
            beacon, size_of_beacon = parsed
            offset += size_of_beacon + min(beacon.remaining, interval - size_of_beacon)
            if offset > size:
                return None
        return offset

    def _beacon_markers(self, index: int) -> dict[tuple[str, int], int]:
        """The last sequence number of each stream the beacon at ``index`` names."""
        beacon = self.read_beacon(index)
        return {
            (marker.stream_key, marker.shard): marker.seq
            for marker in (beacon.markers if beacon is not None else ())
            if marker.stream_key != INTERNAL_KEY
        }

    def _streams_between(
        self, start: int, end: int, known: dict[tuple[str, int], int]
    ) -> dict[tuple[str, int], int]:
        """``known`` (each stream's last sequence number before ``start``, a frame start) brought
        up to ``end``, a later frame start, by decoding the frames between (fewer than a seek's
        batch of messages)."""
        decoder = FrameDecoder(
            self.beacon_interval, start, on_eos="include", path=self.path, known=known
        )
        decoder.feed(os.pread(self._fd, end - start, start))
        while decoder.offset < end and decoder.next_messages(4096):
            pass
        return decoder.known_streams()

    def _find_tip(self) -> int:
        """The offset after the last complete frame, or before it if that is an end-of-stream
        message (a writer reopening the file overwrites it, and a reader starting there reads
        what replaces it). An EOS earlier in the file does not stop the scan.

        Damage the scan meets does not raise here: the tip is then the start of the damaged
        frame (or beacon), so a reader starting there meets the damage on its first read and
        raises it as any read does (a live subscription fails with it once started)."""
        size = self.file_size()
        interval = self.beacon_interval
        index = size // interval
        try:
            while True:
                start = self._align(index * interval if index else HEADER_SIZE, size)
                if start is not None or index == 0:
                    break
                index -= 1
        except StreamFormatError:
            # A damaged beacon: start there, where reading it raises again.
            self._tip_known = ({}, False)
            return index * interval
        start = HEADER_SIZE if start is None else start
        # A reader starting at the tip must know each stream's last sequence number to check
        # its first frame: the scan learns it from the frames it reads, seeded with what the
        # page's beacon names (a scan from the first frame knows every stream).
        markers: dict[tuple[str, int], int] = {}
        if start > HEADER_SIZE:
            markers = self._beacon_markers(index)
        scan = FrameDecoder(
            interval, start, internal=True, on_eos="include", path=self.path, known=markers
        )
        trailing_eos: int | None = None
        at = start
        try:
            while at < size:
                data = os.pread(self._fd, min(READ_CHUNK, size - at), at)
                if not data:
                    break
                scan.feed(data)
                at += len(data)
                while batch := scan.next_messages(4096):
                    last = batch[-1]
                    trailing_eos = last.offset if last.is_eos else None
        except StreamFormatError:
            trailing_eos = None  # the decoder stays at the damaged frame: the tip is there
        tip = scan.offset if trailing_eos is None else trailing_eos
        self.known_size = max(self.known_size, at)
        self._tip_known = (scan.known_streams(), scan.whole_file)
        return tip
