"""The sans-io core of the writer: messages in, file bytes out, with beacons in the right places.

It keeps what the Rust writer keeps for every (stream key, shard): the highest sequence number
and timestamp written and the running checksum over the payload checksums, updated *before* a
frame's bytes go out, so a beacon that splits a frame already counts it. A beacon goes at every
multiple of the interval and only there; its markers are chosen round-robin over the streams in
byte order of their keys, exactly as upstream, so files come out byte for byte the same.

The running checksum is only needed in beacons, so payload checksums are queued per stream and
folded into the register (one CRC call over their big-endian bytes) when a beacon names it.
"""

from __future__ import annotations

import bisect
import struct

from .decoder import first_beacon_at_or_after
from .errors import StreamFormatError, TimestampRangeError
from .format import (
    EOS_PAYLOAD,
    FRAME_FIXED,
    INTERNAL_KEY,
    MAX_PAYLOAD_BYTES,
    MAX_TIMESTAMP_MS,
    MAX_U64,
    crc16,
    encode_beacon,
    encode_frame,
    encode_key,
    markers_per_beacon,
)

_pack_fixed = FRAME_FIXED.pack
_pack_tail = struct.Struct(">HB").pack


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
            self.crcs.clear()
        return self.running

    def copy(self) -> StreamState:
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
        #: Total markers written by this encoder: drives the round-robin choice.
        self._beacon_count = 0
        self._streams: dict[tuple[str, int], StreamState] = {}
        #: Shard-0 states by key: the producer path looks keys up here without building a tuple.
        self._shard0: dict[str, StreamState] = {}
        self._order: list[tuple[bytes, int]] = []
        self._out: list[bytes] = []

    # -- state -----------------------------------------------------------------------------------

    def stream(self, key: str, shard: int = 0) -> StreamState:
        """The state of (key, shard), created empty on first use (validating the key)."""
        state = self._streams.get((key, shard))
        if state is None:
            state = StreamState(key, shard)
            self._streams[(key, shard)] = state
            if shard == 0:
                self._shard0[key] = state
            bisect.insort(self._order, (key.encode(), shard))
        return state

    def restore(self, states: list[StreamState]) -> None:
        """Continue from the states recovered by scanning an existing file."""
        for recovered in states:
            state = self.stream(recovered.key, recovered.shard)
            state.seq, state.ts, state.running = recovered.seq, recovered.ts, recovered.checksum()

    def streams(self) -> list[StreamState]:
        return [self._streams[(k.decode(), s)] for k, s in self._order]

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
        state = self.stream(key, shard)
        state.seq = max(state.seq, seq)
        state.ts = max(state.ts, timestamp_ms)
        frame = encode_frame(state.prefix, shard, seq, timestamp_ms, payload)
        state.crcs.append((frame[-3] << 8) | frame[-2])
        offset = self.offset
        self._splice(frame)
        return offset

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
            for key, shard in chosen:
                state = self._streams[(key.decode(), shard)]
                markers.append((state.prefix, shard, state.seq, state.ts, state.checksum()))
        beacon = encode_beacon(remaining, markers)
        self._out.append(beacon)
        self.offset += len(beacon)
        self._next_beacon += self.beacon_interval
