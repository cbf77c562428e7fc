"""The sans-io core of the writer: messages in, file bytes out, with beacons in the right places.

It keeps what the Rust writer keeps for every (stream key, shard): the highest sequence number
and timestamp written and the running checksum over the payload checksums, updated *before* a
frame's bytes go out, so a beacon that splits a frame already counts it. A beacon goes at every
multiple of the interval and only there; its markers are chosen round-robin over the streams in
byte order of their keys, exactly as upstream, so files come out byte for byte the same.

The running checksum is only needed in beacons, so payload checksums are queued per stream and
folded into the register (one CRC call over their big-endian bytes) when a beacon names it.

Several writers may append to one file (each under the file's lock, see :mod:`.writer`), so what
an encoder holds is in two parts: the state *committed* — as of the end of the file when this
writer last wrote it or caught up with it — and the messages encoded since, not yet written.
A stream's state is updated in place; on the first message of a batch its values are noted, so
:meth:`FrameEncoder.rollback` can take the batch back (to encode it again after what another
writer appended, see :mod:`.catchup`) and :meth:`FrameEncoder.commit` forgets the notes once the
batch is written; the common case, one writer, pays for one note per stream per flush.
"""

from __future__ import annotations

import bisect
import struct
from typing import Literal

from .decoder import FrameDecoder, first_beacon_at_or_after
from .errors import (
    InvalidStreamKeyError,
    SequenceError,
    StreamFormatError,
    TimestampRangeError,
)
from .format import (
    EOS_PAYLOAD,
    FRAME_FIXED,
    INTERNAL_KEY,
    MAX_PAYLOAD_BYTES,
    MAX_TIMESTAMP_MS,
    MAX_U64,
    Message,
    crc16,
    encode_beacon,
    encode_frame,
    encode_key,
    markers_per_beacon,
)
from .tip import Tip

_pack_fixed = FRAME_FIXED.pack
_pack_tail = struct.Struct(">HB").pack
_pack_seq_into = struct.Struct(">Q").pack_into
_INTERNAL = INTERNAL_KEY.encode()


class StreamState:
    """What the beacons say about one (stream key, shard)."""

    __slots__ = ("crcs", "key", "prefix", "running", "seq", "shard", "ts")

    def __init__(self, key: str, shard: int) -> None:
        self.key = key
        self.shard = shard
        self.prefix = encode_key(key)
        self.seq = 0
        self.ts = 0
        self.running = 0xFFFF
        #: Payload checksums not yet folded into ``running``.
        self.crcs: list[int] = []

    def checksum(self) -> int:
        """The running checksum including every payload so far."""
        if self.crcs:
            self.running = crc16(struct.pack(f">{len(self.crcs)}H", *self.crcs), self.running)
            self.crcs = []  # a new list: a batch's undo note may hold the old one
        return self.running

    def copy(self) -> StreamState:
        """An independent state with the same values (queued checksums folded in)."""
        other = StreamState.__new__(StreamState)
        other.key, other.shard, other.prefix = self.key, self.shard, self.prefix
        other.seq, other.ts, other.running = self.seq, self.ts, self.checksum()
        other.crcs = []
        return other


class FrameEncoder:
    """Turns messages into the bytes to append at :attr:`offset`; collect them with :meth:`take`."""

    def __init__(self, beacon_interval: int, offset: int, *, path: str | None = None) -> None:
        self.beacon_interval = beacon_interval
        #: File offset just past the last byte encoded.
        self.offset = offset
        self.path = path
        self._next_beacon = first_beacon_at_or_after(offset, beacon_interval)
        self._markers = markers_per_beacon(beacon_interval)
        #: Total markers written to the file so far: drives the round-robin choice.
        self._beacon_count = 0
        #: Every stream's state, the uncommitted batch included.
        self._streams: dict[tuple[str, int], StreamState] = {}
        #: What the streams the batch touched held before it (None: the batch created it):
        #: (seq, ts, running, checksum list, its length).
        self._undo: dict[tuple[str, int], tuple[int, int, int, list[int], int] | None] = {}
        #: The shard-0 states the batch touched, by key: the producer path looks keys up here
        #: without building a tuple.
        self._shard0: dict[str, StreamState] = {}
        self._order: list[tuple[bytes, int]] = []
        self._out: list[bytes] = []
        #: Offsets of the batch's messages written with a given seq (not numbered here).
        self._explicit: set[int] = set()
        self._committed_order = self._order
        #: Where the file ended when this encoder last committed (or caught up).
        self.committed_offset = offset
        self._committed_at = (self._next_beacon, 0)
        #: Whether every stream of the file is known here (this encoder wrote or caught up
        #: with all of it), so a stream it does not know is new to the file.
        self.knows_every_stream = True
        #: The batch wrote the internal stream (an end-of-stream message, maybe).
        self._internal_batch = False
        #: The batch's last end-of-stream message: (its offset, the internal stream's state
        #: before it, the markers written before it, the offset after it and its beacons).
        self._eos_note: tuple[int, StreamState | None, int, int] | None = None
        #: What :meth:`tip` knows of the file's last frame: None (not an end-of-stream message),
        #: ``_eos_note``'s kind of tuple (it is one), or False (unknown: no tip recorded).
        self._trailing_eos: tuple[int, StreamState | None, int, int] | Literal[False] | None = None

    # -- state -----------------------------------------------------------------------------------

    def stream(self, key: str, shard: int = 0) -> StreamState:
        """The state of (key, shard) the batch updates, created empty on first use (validating
        the key); on the batch's first use its values are noted for :meth:`rollback`."""
        stream = (key, shard)
        state = self._streams.get(stream)
        if stream in self._undo:
            assert state is not None
            return state
        if key == INTERNAL_KEY:
            self._internal_batch = True
        if state is not None:
            self._undo[stream] = (state.seq, state.ts, state.running, state.crcs, len(state.crcs))
        else:
            if not key:  # the format holds it, but no subscription can name it
                raise InvalidStreamKeyError(
                    "invalid stream key '': a key is 1 to 249 characters of [A-Za-z0-9._-]",
                    path=self.path,
                )
            state = self._streams[stream] = StreamState(key, shard)
            self._undo[stream] = None
            if self._order is self._committed_order:
                self._order = list(self._order)
            bisect.insort(self._order, (key.encode(), shard))
        if shard == 0:
            self._shard0[key] = state
        return state

    def current(self, key: str, shard: int = 0) -> StreamState | None:
        """The state of (key, shard) including the batch, without touching it; None if unknown."""
        return self._streams.get((key, shard))

    def streams(self) -> list[StreamState]:
        """Every stream's current state, in the beacons' order."""
        return [self._streams[(k.decode(), shard)] for k, shard in self._order]

    # -- committing and taking back --------------------------------------------------------------

    def commit(self) -> None:
        """The batch was written: its states become the committed ones."""
        if self._internal_batch:
            note = self._eos_note
            self._trailing_eos = note if note is not None and note[3] == self.offset else False
        elif self.offset != self.committed_offset:
            self._trailing_eos = None
        self._internal_batch = False
        self._eos_note = None
        if self._undo:
            self._undo = {}
            self._shard0 = {}
        self._committed_order = self._order
        self.committed_offset = self.offset
        self._committed_at = (self._next_beacon, self._beacon_count)
        self._explicit.clear()

    def rollback(self) -> list[tuple[Message, bool]]:
        """Take back the batch not yet committed; returns its messages, each with whether it was
        written with a given seq (else numbered by :meth:`append`), in order.

        The bytes not yet taken are decoded to recover them, so this costs only when it is
        needed. Call it before :meth:`take`.
        """
        data = b"".join(self._out)
        start = self.committed_offset
        explicit = self._explicit
        batch: list[tuple[Message, bool]] = []
        if data:
            decoder = FrameDecoder(
                self.beacon_interval, start, internal=True, on_eos="include", path=self.path
            )
            decoder.feed(data)
            while messages := decoder.next_messages(4096):
                batch.extend((m, m.offset in explicit) for m in messages)
        self.discard()
        return batch

    def discard(self) -> None:
        """Forget the batch not yet committed (it was not written)."""
        self._out.clear()
        streams = self._streams
        for stream, before in self._undo.items():
            if before is None:
                del streams[stream]
                continue
            state = streams[stream]
            state.seq, state.ts, state.running, crcs, count = before
            del crcs[count:]
            state.crcs = crcs
        self._undo = {}
        self._shard0 = {}
        self._order = self._committed_order
        self.offset = self.committed_offset
        self._next_beacon, self._beacon_count = self._committed_at
        self._explicit.clear()
        self._internal_batch = False
        self._eos_note = None

    def replay(self, batch: list[tuple[Message, bool]]) -> None:
        """Encode again, after the committed state, what :meth:`rollback` took back (first the
        beacon due where the file ends, if it ends on a boundary)."""
        self.beacon_now()
        for message, explicit in batch:
            if explicit:
                self.write(
                    message.stream_key,
                    message.shard,
                    message.seq,
                    message.timestamp_ms,
                    message.payload,
                )
            else:
                self.append(message.stream_key, message.payload, message.timestamp_ms)

    # -- catching up with what other writers appended (no batch held) ----------------------------

    def observe(self, key: str, shard: int, seq: int, timestamp_ms: int, payload_crc: int) -> None:
        """Count a message another writer appended, as if this encoder had written it."""
        state = self._streams.get((key, shard))
        if state is None:
            state = self._streams[(key, shard)] = StreamState(key, shard)
            self._order = self._committed_order = list(self._committed_order)
            bisect.insort(self._order, (key.encode(), shard))
        if seq > state.seq:
            state.seq = seq
        if timestamp_ms > state.ts:
            state.ts = timestamp_ms
        state.crcs.append(payload_crc)

    def observe_messages(self, messages: list[Message]) -> None:
        """:meth:`observe` each of ``messages`` (decoded, so their checksums are right)."""
        get = self._streams.get
        for key, shard, seq, timestamp_ms, payload, _ in messages:
            state = get((key, shard))
            if state is None:
                self.observe(key, shard, seq, timestamp_ms, crc16(payload))
                continue
            if seq > state.seq:
                state.seq = seq
            if timestamp_ms > state.ts:
                state.ts = timestamp_ms
            state.crcs.append(crc16(payload))

    def mark(self) -> StreamState | None:
        """What :meth:`forget_eos` needs to take back an end-of-stream message observed next."""
        state = self._streams.get((INTERNAL_KEY, 0))
        return None if state is None else state.copy()

    def forget_eos(self, before: StreamState | None) -> None:
        """Take back the end-of-stream message observed since :meth:`mark` returned ``before``
        (the next message overwrites it); the caller takes back the markers of the beacons
        after it with :meth:`observe_markers`."""
        if before is not None:
            self._streams[(INTERNAL_KEY, 0)] = before
        else:
            self._streams.pop((INTERNAL_KEY, 0), None)
            self._order = self._committed_order = [
                k for k in self._committed_order if k != (_INTERNAL, 0)
            ]

    def observe_markers(self, count: int) -> None:
        """Count the markers of beacons another writer wrote (the round-robin continues)."""
        self._beacon_count += count

    def move_to(self, offset: int) -> None:
        """The file now ends at ``offset`` (a frame or beacon start): continue from there."""
        assert not self._out and not self._undo, "move_to with a batch held"
        self._trailing_eos = None  # counted by a catch-up, which takes a trailing one back
        self.offset = offset
        self._next_beacon = first_beacon_at_or_after(offset, self.beacon_interval)
        self.committed_offset = offset
        self._committed_at = (self._next_beacon, self._beacon_count)

    # -- the tip record (see :mod:`.tip`; no batch held) ----------------------------------------

    def tip(self, size: int) -> Tip | None:
        """The state the next writer continues the file from, the file being ``size`` bytes long
        and all of it written or counted here; None if that cannot be told.

        It is what :func:`~trio_streams.file.catchup.catch_up` leaves an encoder in after
        counting the file: a trailing end-of-stream message this encoder wrote is taken back
        (the state before it, the markers of the beacons from it on, its offset as the
        position), as the next append overwrites it. ``size`` beyond :attr:`committed_offset`
        is a trailing end-of-stream message a catch-up counted and took back already."""
        assert not self._out and not self._undo, "tip with a batch held"
        trailing = self._trailing_eos
        position = self.committed_offset
        if trailing is False or size < position:
            return None
        streams = self._streams
        count = self._beacon_count
        internal = streams.get((INTERNAL_KEY, 0))
        if isinstance(trailing, tuple):
            if size != position:
                return None
            position, internal, count, _ = trailing
        out = []
        for key, shard in self._order:
            if key == _INTERNAL and shard == 0:
                if internal is None:
                    continue  # the stream began with the end-of-stream message taken back
                state = internal
            else:
                state = streams[(key.decode(), shard)]
            out.append((state.prefix, shard, state.seq, state.ts, state.checksum()))
        return Tip(size, position, count, out)

    def adopt(self, tip: Tip) -> None:
        """Continue from ``tip`` (a record that matched the file) as if the whole file had been
        counted here: the state a catch-up from the header would reach."""
        assert not self._out and not self._undo, "adopt with a batch held"
        streams: dict[tuple[str, int], StreamState] = {}
        order = []
        for prefix, shard, seq, ts, running in tip.streams:
            key = prefix[1:].decode("ascii")
            state = StreamState.__new__(StreamState)
            state.key, state.shard, state.prefix = key, shard, prefix
            state.seq, state.ts, state.running, state.crcs = seq, ts, running, []
            streams[(key, shard)] = state
            order.append((prefix[1:], shard))
        order.sort()
        self._streams = streams
        self._order = self._committed_order = order
        self._beacon_count = tip.beacon_count
        self.knows_every_stream = True
        self.move_to(tip.position)

    # -- encoding --------------------------------------------------------------------------------

    def append(self, key: str, payload: bytes, timestamp_ms: int) -> tuple[int, int]:
        """Encode the next message of ``key`` (shard 0, seq = last + 1); returns (seq, offset)."""
        state = self._shard0.get(key)
        if state is None:
            state = self.stream(key, 0)
        if not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            raise TimestampRangeError(
                f"timestamp {timestamp_ms} ms outside 0..{MAX_TIMESTAMP_MS}", path=self.path
            )
        size = len(payload)
        if size > MAX_PAYLOAD_BYTES:
            raise StreamFormatError(f"payload of {size} bytes exceeds 4 GiB", path=self.path)
        seq = state.seq + 1
        state.seq = seq
        if timestamp_ms > state.ts:
            state.ts = timestamp_ms
        crc = crc16(payload)
        state.crcs.append(crc)
        frame = b"".join((state.prefix, _pack_fixed(0, seq, timestamp_ms, size), payload,
                          _pack_tail(crc, 13)))  # fmt: skip
        offset = self.offset
        end = offset + len(frame)
        if end < self._next_beacon:
            self._out.append(frame)
            self.offset = end
        else:
            self._splice(frame)
        return seq, offset

    def append_frames(self, messages: list[tuple[str, int, int, bytes]]) -> None:
        """Encode shard-0 messages whose frames were built ahead (by a writer, outside the
        file's lock) with provisional sequence numbers: each is numbered here, its seq field
        rewritten where it differs, and the frames go out with the beacons due among them —
        the bytes :meth:`append` would have made for the same messages.

        ``messages`` holds, in order: (key, the seq its frame holds, timestamp ms, frame). Keys,
        timestamps and sizes were checked when the frames were built."""
        joined = b"".join([m[3] for m in messages])
        if self.offset + len(joined) < self._next_beacon and self._append_one_key(joined, messages):
            return
        frames = bytearray(joined)
        view = memoryview(frames)
        shard0 = self._shard0
        patch = _pack_seq_into
        out = self._out
        offset = self.offset
        next_beacon = self._next_beacon
        done = 0  # frames[:done] went out
        at = 0  # where the current frame starts in ``frames``
        for key, written, timestamp_ms, frame in messages:
            state = shard0.get(key)
            if state is None:
                state = self.stream(key, 0)
            seq = state.seq + 1
            state.seq = seq
            if seq != written:
                patch(frames, at + frame[0] + 9, seq)  # after the key and the shard
            if timestamp_ms > state.ts:
                state.ts = timestamp_ms
            state.crcs.append((frame[-3] << 8) | frame[-2])
            size = len(frame)
            end = offset + size
            if end >= next_beacon:  # the frame reaches a boundary: beacons due, counting it
                if at > done:
                    out.append(bytes(view[done:at]))
                self.offset = offset
                self._splice(bytes(view[at : at + size]))
                offset, next_beacon = self.offset, self._next_beacon
                done = at + size
            else:
                offset = end
            at += size
        if at > done:
            out.append(bytes(view[done:at]))
        self.offset = offset

    def _append_one_key(self, joined: bytes, messages: list[tuple[str, int, int, bytes]]) -> bool:
        """:meth:`append_frames` of a batch of one key with no beacon due among its frames, in
        bulk; False (nothing done) for any other batch."""
        key = messages[0][0]
        for message in messages:
            if message[0] != key:
                return False
        state = self._shard0.get(key)
        if state is None:
            state = self.stream(key, 0)
        shift = state.seq + 1 - messages[0][1]  # the provisional seqs follow each other
        if shift:
            frames = bytearray(joined)
            patch = _pack_seq_into
            at = 0
            for _, written, _, frame in messages:
                patch(frames, at + frame[0] + 9, written + shift)  # after the key and the shard
                at += len(frame)
            joined = bytes(frames)
        state.seq = messages[-1][1] + shift
        latest = max([m[2] for m in messages])
        if latest > state.ts:
            state.ts = latest
        state.crcs.extend([(m[3][-3] << 8) | m[3][-2] for m in messages])
        self._out.append(joined)
        self.offset += len(joined)
        return True

    def write(self, key: str, shard: int, seq: int, timestamp_ms: int, payload: bytes) -> int:
        """Encode a message with the given shard and seq (low-level sink); returns its offset."""
        if not 0 <= timestamp_ms <= MAX_TIMESTAMP_MS:
            raise TimestampRangeError(
                f"timestamp {timestamp_ms} ms outside 0..{MAX_TIMESTAMP_MS}", path=self.path
            )
        if not (0 <= shard <= MAX_U64 and 0 <= seq <= MAX_U64):
            raise StreamFormatError(f"shard {shard} or seq {seq} outside u64", path=self.path)
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise StreamFormatError(
                f"payload of {len(payload)} bytes exceeds 4 GiB", path=self.path
            )
        if key != INTERNAL_KEY:
            self._check_follows(key, shard, seq)
        is_eos = key == INTERNAL_KEY and shard == 0 and payload == EOS_PAYLOAD
        before = (self.offset, self.mark(), self._beacon_count) if is_eos else None
        state = self.stream(key, shard)
        state.seq = max(state.seq, seq)
        state.ts = max(state.ts, timestamp_ms)
        frame = encode_frame(state.prefix, shard, seq, timestamp_ms, payload)
        state.crcs.append((frame[-3] << 8) | frame[-2])
        offset = self.offset
        self._explicit.add(offset)
        self._splice(frame)
        if before is not None:
            self._eos_note = (*before, self.offset)
        return offset

    def _check_follows(self, key: str, shard: int, seq: int) -> None:
        """Readers hold a stream's sequence numbers to following each other, from 1 (or 0):
        refuse to write one that does not (see :class:`SequenceError`)."""
        state = self._streams.get((key, shard))
        stream = repr(key) + ("" if shard == 0 else f" shard {shard}")
        if state is not None:
            if seq != state.seq + 1:
                raise SequenceError(
                    f"seq {seq} of stream {stream} does not follow seq {state.seq}, its last: "
                    "the sequence numbers of a stream follow each other",
                    path=self.path,
                )
        elif seq > 1 and self.knows_every_stream:
            raise SequenceError(
                f"seq {seq} would be the first of stream {stream}: a stream's sequence numbers "
                "start at 1 (or 0)",
                path=self.path,
            )

    def write_eos(self, timestamp_ms: int) -> int:
        """Encode the end-of-stream message; returns its offset."""
        return self.write(INTERNAL_KEY, 0, 0, timestamp_ms, EOS_PAYLOAD)

    def beacon_now(self) -> None:
        """Write the beacon due at :attr:`offset` when it sits on a boundary (after a reopen)."""
        if self.offset == self._next_beacon:
            self._emit_beacon(0)

    def take(self) -> bytes:
        """The bytes encoded since the last call."""
        out = b"".join(self._out)
        self._out.clear()
        return out

    @property
    def buffered(self) -> bool:
        return bool(self._out)

    def _splice(self, frame: bytes) -> None:
        pos = 0
        size = len(frame)
        out = self._out
        while pos < size:
            take = min(size - pos, self._next_beacon - self.offset)
            out.append(frame[pos : pos + take])
            pos += take
            self.offset += take
            if self.offset == self._next_beacon:
                self._emit_beacon(size - pos)

    def _emit_beacon(self, remaining: int) -> None:
        order = self._order
        markers = []
        if order and self._markers:
            start = self._beacon_count % len(order)
            chosen = (order[start:] + order[:start])[: min(len(order), self._markers)]
            self._beacon_count += len(chosen)
            streams = self._streams
            for key, shard in chosen:
                state = streams[(key.decode(), shard)]
                markers.append((state.prefix, shard, state.seq, state.ts, state.checksum()))
        beacon = encode_beacon(remaining, markers)
        self._out.append(beacon)
        self.offset += len(beacon)
        self._next_beacon += self.beacon_interval
