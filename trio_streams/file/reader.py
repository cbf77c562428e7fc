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

import os
from collections.abc import Collection, Generator, Iterator
from typing import NoReturn

from ..positions import Position, PositionKind
from .decoder import EosPolicy, FrameDecoder
from .errors import (
    SeekError,
    SeekOutOfRangeError,
    StreamFileNotFoundError,
    StreamFormatError,
)
from .format import (
    HEADER_SIZE,
    Header,
    Message,
    decode_beacon,
    decode_header,
    max_markers,
)
from .survey import Survey, target_value

#: Bytes read from the file per call: large enough to amortise the syscall, small enough to keep
#: a read (and so the time between two checkpoints of an async caller) short.
READ_CHUNK = 256 * 1024
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
        self._decoder = self._decoder_at(HEADER_SIZE)
        if start is not None and start.kind is PositionKind.END:
            self._decoder = self._decoder_at(self._find_tip())

    # -- reading ---------------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """File offset of the next message (or beacon) to decode."""
        return self._decoder.offset

    @property
    def eos(self) -> Message | None:
        """The end-of-stream message this reader stopped at (or holds at the tip), if any."""
        return self._decoder.eos

    @property
    def decoder(self) -> FrameDecoder:
        return self._decoder

    def read_messages(self, max_n: int) -> list[Message]:
        """Up to ``max_n`` messages from the buffer and, if that is short, one more chunk read.

        Returns fewer (maybe none) at the end of what the file holds now. A corrupt frame raises
        its typed error, after the messages before it have been returned.
        """
        decoder = self._decoder
        out = decoder.next_messages(max_n)
        if len(out) >= max_n or decoder.eos is not None:
            return out
        try:
            while len(out) < max_n and decoder.eos is None:
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
        except StreamFormatError:
            if not out:
                raise
            return out
        if self._live and len(out) < max_n and decoder.pending:
            # Bytes of a frame still being written, or an EOS a reopening writer will overwrite.
            decoder.discard_pending()
        return out

    def check_finished(self) -> None:
        """For a finished file: raise :class:`TruncatedError` if the last frame is cut short."""
        if self.at_eof:
            self._decoder.check_finished()

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

    def seek(self, position: Position, *, key: str | None = None, shard: int = 0) -> int:
        """Move to ``position`` (see :meth:`seek_steps`) and return the offset landed on."""
        return run_steps(self.seek_steps(position, key=key, shard=shard))

    def seek_steps(
        self, position: Position, *, key: str | None = None, shard: int = 0
    ) -> SeekSteps:
        """Move to ``position`` in bounded steps; the generator returns the new offset.

        Beginning and end move straight there. A sequence number lands on the first message of
        the stream (``key``, ``shard``) with seq ≥ n, a timestamp on the first one strictly
        later, found by surveying beacons, rewinding to the bracketing beacon and reading forward
        through messages of that stream only. A sequence number one past the stream's last lands
        at the end, where that message will be written. Anything past the end raises
        :class:`SeekOutOfRangeError`, and the reader is exactly where it was: the new position is
        only committed when the seek succeeds.
        """
        if position.kind is PositionKind.BEGINNING:
            self._commit(HEADER_SIZE)
            return HEADER_SIZE
        if position.kind is PositionKind.END:
            tip = self._find_tip()
            self._commit(tip)
            return tip
        key = self._seek_key(key, position)
        target = target_value(position)
        size = self.file_size()
        interval = self.beacon_interval
        survey = Survey(position, key, shard, size // interval)
        beacon_bytes = max_beacon_bytes(interval)
        probes = 0
        while (index := survey.next_probe()) is not None:
            data = os.pread(self._fd, beacon_bytes, index * interval)
            parsed = decode_beacon(data, 0, index * interval, self.path)
            survey.observe(index, None if parsed is None else parsed[0])
            probes += 1
            if probes % _PROBES_PER_STEP == 0:
                yield
        start = self._align(survey.left * interval if survey.left else HEADER_SIZE, size)
        last_seq = survey.left_marker[0] if survey.left_marker else 0
        if start is not None:
            scan = FrameDecoder(interval, start, keys=(key,), on_eos="stop", path=self.path)
            at = start
            while True:
                batch = scan.next_messages(4096)
                for message in batch:
                    if message.shard != shard:
                        continue
                    if position.kind is PositionKind.SEQUENCE:
                        if message.seq >= target:
                            self._commit(message.offset)
                            return message.offset
                        last_seq = max(last_seq, message.seq)
                    elif message.timestamp_ms > target:
                        self._commit(message.offset)
                        return message.offset
                if batch:
                    continue
                if scan.eos is not None or at >= size:
                    break
                data = os.pread(self._fd, min(READ_CHUNK, size - at), at)
                if not data:
                    break
                scan.feed(data)
                at += len(data)
                yield
        if position.kind is PositionKind.SEQUENCE and target == last_seq + 1:
            tip = self._find_tip()
            self._commit(tip)
            return tip
        self._refuse(position, key, shard, last_seq)

    def _refuse(self, position: Position, key: str, shard: int, last_seq: int) -> NoReturn:
        what = (
            f"sequence {position.value} is past the last sequence {last_seq} of stream {key!r}"
            if position.kind is PositionKind.SEQUENCE
            else f"no message of stream {key!r} is later than {position.value} ms"
        )
        if shard:
            what += f" (shard {shard})"
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

    def _decoder_at(self, offset: int) -> FrameDecoder:
        return FrameDecoder(
            self.beacon_interval,
            offset,
            keys=self.keys,
            internal=self._internal,
            on_eos=self._on_eos,
            path=self.path,
        )

    def rewind_to(self, offset: int) -> None:
        """Continue at ``offset``, a frame (or beacon) start the caller knows, e.g. where it
        wrote a message itself. Forgets an end-of-stream message it had stopped at."""
        self._commit(offset)

    def _commit(self, offset: int) -> None:
        self._decoder = self._decoder_at(offset)
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

    def _find_tip(self) -> int:
        """The offset after the last complete message (before a trailing EOS when holding)."""
        size = self.file_size()
        interval = self.beacon_interval
        index = size // interval
        while True:
            start = self._align(index * interval if index else HEADER_SIZE, size)
            if start is not None or index == 0:
                break
            index -= 1
        start = HEADER_SIZE if start is None else start
        scan = FrameDecoder(interval, start, keys=(), on_eos=self._on_eos, path=self.path)
        at = start
        while at < size and scan.eos is None:
            data = os.pread(self._fd, min(READ_CHUNK, size - at), at)
            if not data:
                break
            scan.feed(data)
            at += len(data)
            scan.next_messages(1)
        self.known_size = max(self.known_size, at)
        return scan.offset
