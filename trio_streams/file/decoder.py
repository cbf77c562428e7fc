"""The sans-io core of the reader: feed it file bytes, take decoded messages out.

Like h11, it does no I/O. It keeps a logical file offset, steps over the beacon found at every
multiple of the interval, joins a frame that beacons split, checks each payload's checksum and
each key, and hands back whole messages with the offset of their frame. When the bytes it holds
end inside a frame it simply returns what it has: the caller decides whether that means "not
written yet" (a live file) or corruption (a finished file, see :meth:`FrameDecoder.check_finished`).

The common case, a frame that lies wholly inside one beacon page, is decoded inline with
``struct.unpack_from`` and one slice per field; only split frames take the slower gathering path.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any, Literal

from .errors import (
    BeaconError,
    ChecksumError,
    FrameEndError,
    InvalidStreamKeyError,
    SequenceError,
    StreamFormatError,
    TimestampRangeError,
    TruncatedError,
)
from .format import (
    EOS_PAYLOAD,
    FRAME_FIXED,
    HEADER_SIZE,
    INTERNAL_KEY,
    MAX_TIMESTAMP_MS,
    Beacon,
    Message,
    crc16,
    decode_beacon,
    key_is_valid,
)

#: What to do on reaching an end-of-stream message. An EOS that stays in the file ends the stream
#: for every reader (as upstream's readers do); the policies differ only at the tip:
#: ``stop`` — consume it, remember it in :attr:`FrameDecoder.eos` and decode nothing more (replay);
#: ``hold`` — stop *before* it and remember it in :attr:`FrameDecoder.held_eos` without consuming
#: it: the bytes held may predate a writer that reopened the file and overwrote it. The caller
#: looks at the file again (see :meth:`FileReader.read_messages`): if the EOS is still there with
#: more written after it, it stays and ends the stream (:meth:`FrameDecoder.end_at_held_eos`);
#: if it was overwritten, reading goes on with what replaced it (live);
#: ``include`` — treat it as an ordinary message of the internal key (scans).
EosPolicy = Literal["stop", "hold", "include"]

_unpack_fixed = FRAME_FIXED.unpack_from
_new_message = tuple.__new__
_EOS_KEY = INTERNAL_KEY.encode()
#: Bytes of a frame before its payload, beyond the key: key length, shard, seq, ts, size.
_HEAD_FIXED = 1 + FRAME_FIXED.size
#: The last seq of a stream (shard 0) before its first message: no seq follows it.
_NO_SEQ = -2
#: Beacons met while gathering a split frame: (offset, beacon, frame bytes still to gather).
_Met = list[tuple[int, Beacon, int]]


def first_beacon_at_or_after(offset: int, interval: int) -> int:
    """The offset of the first beacon at or after ``offset`` (beacons sit at k·interval, k ≥ 1)."""
    if offset > 0 and offset % interval == 0:
        return offset
    return (offset // interval + 1) * interval


class FrameDecoder:
    """Decodes frames from bytes fed in file order, starting at a frame or beacon boundary.

    ``keys`` limits the messages returned to those stream keys (None: every key but the internal
    one); ``internal=True`` also returns messages of the internal key. Frames of other keys are
    still checked, so corruption anywhere is reported.
    """

    def __init__(
        self,
        beacon_interval: int,
        offset: int = HEADER_SIZE,
        *,
        keys: Collection[str] | None = None,
        internal: bool = False,
        on_eos: EosPolicy = "stop",
        path: str | None = None,
        known: Mapping[tuple[str, int], int] | None = None,
        complete: bool = False,
    ) -> None:
        self.beacon_interval = beacon_interval
        #: File offset of the first byte not yet decoded: always a frame or beacon start.
        self.offset = offset
        self.path = path
        self._keys = None if keys is None else frozenset(keys)
        self._internal = internal
        self._on_eos = on_eos
        self._buf = b""
        self._pos = 0
        self._next_beacon = first_beacon_at_or_after(offset, beacon_interval)
        #: Per key bytes: [name, wanted, internal, last seq in shard 0 (_NO_SEQ: none seen)].
        self._key_info: dict[bytes, list[Any]] = {}
        #: Last seq per (key bytes, shard) of shards other than 0.
        self._shard_seqs: dict[tuple[bytes, int], int] = {}
        #: Whether every frame of the file has gone through this decoder (it started at the
        #: first frame): then a beacon marker can only name a stream it has seen.
        #: ``known`` seeds the last sequence number of streams before ``offset`` (learnt by
        #: whoever found that offset), so the first frame decoded is held to the same rules as
        #: any other; ``complete`` says it names every stream before ``offset``.
        self._whole_file = offset == HEADER_SIZE or complete
        #: The last beacon stepped over: (index = offset // interval, beacon).
        self.last_beacon: tuple[int, Beacon] | None = None
        #: The end-of-stream message that ended the stream (consumed; nothing more is decoded).
        self.eos: Message | None = None
        #: ``hold``: the end-of-stream message decoding stopped before (not consumed).
        self.held_eos: Message | None = None
        #: The file bytes of :attr:`held_eos` as they were fed (beacons they span included).
        self.held_eos_bytes = b""
        self._held_next = (0, 0, 0, 0)
        #: Markers in every beacon stepped over so far: a writer continuing the file after the
        #: bytes decoded carries on its round-robin choice of markers from here.
        self.beacon_markers = 0
        for (name, shard), seq in (known or {}).items():
            kb = name.encode("ascii")
            info = self._key_info.get(kb) or self._learn_key(kb, offset)
            if shard == 0:
                info[3] = seq
            else:
                self._shard_seqs[(kb, shard)] = seq

    # -- feeding ---------------------------------------------------------------------------------

    def feed(self, data: bytes) -> None:
        """Append bytes that follow, in the file, the bytes fed so far."""
        if not data:
            return
        if self._pos >= len(self._buf):
            self._buf = data
        else:
            self._buf = self._buf[self._pos :] + data
        self._pos = 0

    @property
    def fed_end(self) -> int:
        """The file offset just past the last byte fed."""
        return self.offset + len(self._buf) - self._pos

    @property
    def pending(self) -> int:
        """Bytes fed but not yet decoded (a frame or beacon still being written, or cut)."""
        return len(self._buf) - self._pos

    def discard_pending(self) -> None:
        """Forget undecoded bytes so they are fed again from :attr:`offset`.

        A live reader does this when it found the file's end inside a frame: the writer that
        finishes (or, after a crash, rewrites) that frame may change those bytes.
        """
        self._buf = b""
        self._pos = 0
        self.held_eos = None
        self.held_eos_bytes = b""

    def end_at_held_eos(self) -> None:
        """The held end-of-stream message stays in the file: consume it; the stream ended."""
        assert self.held_eos is not None
        self.eos, self.held_eos, self.held_eos_bytes = self.held_eos, None, b""
        self._commit(*self._held_next)

    def check_finished(self) -> None:
        """Declare that no more bytes will come; raise :class:`TruncatedError` if one was cut."""
        if self.pending and self.eos is None and self.held_eos is None:
            what = "beacon" if self.offset == self._next_beacon else "frame"
            raise TruncatedError(
                f"file ends {self.pending} bytes into a {what}", path=self.path, offset=self.offset
            )

    def known_streams(self) -> dict[tuple[str, int], int]:
        """The last sequence number decoded of each stream (key, shard), internal ones aside."""
        out = {(info[0], 0): info[3] for info in self._key_info.values() if info[3] != _NO_SEQ}
        for (kb, shard), seq in self._shard_seqs.items():
            out[(kb.decode("ascii"), shard)] = seq
        return out

    @property
    def whole_file(self) -> bool:
        """Whether every frame before :attr:`offset` went through this decoder."""
        return self._whole_file

    @property
    def stopped(self) -> bool:
        """Whether the decoder stopped at an end-of-stream message that ended the stream."""
        return self.eos is not None

    # -- decoding --------------------------------------------------------------------------------

    def next_messages(self, max_n: int) -> list[Message]:
        """Decode up to ``max_n`` wanted messages from the bytes held; fewer when bytes run out.

        A corrupt frame raises its typed error, but only once the messages before it have been
        returned: the decoder stays at the bad frame, so the next call raises.
        """
        out: list[Message] = []
        if self.eos is not None:
            return out
        self.held_eos = None  # met again below if still there
        buf = self._buf
        p = self._pos
        off = self.offset
        nb = self._next_beacon
        end = len(buf)
        interval = self.beacon_interval
        key_info = self._key_info
        append = out.append
        mk = self.beacon_markers
        try:
            while len(out) < max_n and p < end:
                if off == nb:
                    passed = self._pass_beacon(buf, p, off)
                    if passed is None:
                        break
                    size, markers = passed
                    mk += markers
                    p += size
                    off += size
                    nb += interval
                    continue
                klen = buf[p]
                head_len = klen + _HEAD_FIXED
                flen = 0  # the frame's size, once its head is read here (0: not read)
                if off + head_len <= nb and p + head_len <= end:
                    shard, seq, ts, plen = _unpack_fixed(buf, p + 1 + klen)
                    flen = head_len + plen + 3
                met: _Met | None = None
                if flen and off + flen <= nb and p + flen <= end:
                    # Fast path: the whole frame lies inside this beacon page, and the buffer.
                    kb = buf[p + 1 : p + 1 + klen]
                    ps = p + head_len
                    pe = ps + plen
                    payload = buf[ps:pe]
                    received = (buf[pe] << 8) | buf[pe + 1]
                    last_byte = buf[pe + 2]
                    np, noff, nnb = p + flen, off + flen, nb
                else:
                    split = self._split_frame(buf, p, off, nb, klen)
                    if split is None:
                        break
                    shard, seq, ts, plen, kb, payload, received, last_byte, np, noff, nnb, met = (
                        split
                    )
                info = key_info.get(kb) or self._learn_key(kb, off)
                computed = crc16(payload)
                if ts > MAX_TIMESTAMP_MS or computed != received or last_byte != 13:
                    raise self._frame_error(ts, received, computed, last_byte, plen, head_len, off)
                if met is None:
                    # A stream's sequence numbers follow each other; the common case is shard
                    # 0 and the next number (before a stream's first message info[3] is -2).
                    if shard or seq != info[3] + 1:
                        self._follow(info, kb, shard, seq, off)
                    else:
                        info[3] = seq
                    gm = 0
                else:
                    gm = self._follow_split(info, kb, shard, seq, off, met)
                if info[2] and payload == EOS_PAYLOAD and self._on_eos != "include":
                    eos = _new_message(Message, (info[0], shard, seq, ts, payload, off))
                    p, off, nb, mk = self._meet_eos(
                        eos, buf[p:np], (p, off, nb, mk), (np, noff, nnb, mk + gm)
                    )
                    break
                if info[1]:
                    append(_new_message(Message, (info[0], shard, seq, ts, payload, off)))
                p, off, nb = np, noff, nnb
                mk += gm
        except StreamFormatError:
            if not out:
                self._commit(p, off, nb, mk)
                raise
        self._commit(p, off, nb, mk)
        return out

    def _pass_beacon(self, buf: bytes, p: int, off: int) -> tuple[int, int] | None:
        """Check the beacon at ``buf[p:]`` (offset ``off``), between two frames; returns its
        size and how many markers it holds, or None if the buffer ends inside it."""
        parsed = decode_beacon(buf, p, off, self.path)
        if parsed is None:
            return None
        beacon, size = parsed
        if beacon.remaining:
            raise BeaconError(
                f"beacon between two frames says {beacon.remaining} bytes of a frame remain",
                path=self.path,
                offset=off,
            )
        if beacon.markers:
            self._check_markers(beacon, off, None)
        self.last_beacon = (off // self.beacon_interval, beacon)
        return size, len(beacon.markers)

    def _split_frame(
        self, buf: bytes, p: int, off: int, nb: int, klen: int
    ) -> tuple[int, int, int, int, bytes, bytes, int, int, int, int, int, _Met] | None:
        """The frame at ``buf[p:]`` (offset ``off``) that a beacon splits, or whose head is not
        all in the buffer: its shard, seq, timestamp, payload size, key, payload, checksum and
        last byte, the buffer index, offset and next beacon after it, and the beacons it met
        (each checked to say how many frame bytes follow it); None if the buffer ends first."""
        head_len = klen + _HEAD_FIXED
        got = self._gather(buf, p, off, nb, head_len)
        if got is None:
            return None
        head, hp, hoff, hnb, hmet = got
        shard, seq, ts, plen = _unpack_fixed(head, 1 + klen)
        got = self._gather(buf, hp, hoff, hnb, plen + 3)
        if got is None:
            return None
        rest, np, noff, nnb, met = got
        self._check_remaining(hmet, plen + 3)
        self._check_remaining(met, 0)
        received = (rest[-3] << 8) | rest[-2]
        kb, payload = head[1 : 1 + klen], rest[:plen]
        return shard, seq, ts, plen, kb, payload, received, rest[-1], np, noff, nnb, hmet + met

    def _meet_eos(
        self,
        eos: Message,
        frame: bytes,
        before: tuple[int, int, int, int],
        after: tuple[int, int, int, int],
    ) -> tuple[int, int, int, int]:
        """An end-of-stream message, not returned as a message: held (``on_eos="hold"``: the
        reader decides whether the stream ended) or the end of the stream. Returns where the
        decoder stays: ``before`` it when held, ``after`` it when it ended the stream."""
        if self._on_eos == "hold":
            self.held_eos = eos
            self.held_eos_bytes = frame
            self._held_next = after
            return before
        self.eos = eos
        return after

    def _commit(self, p: int, off: int, nb: int, markers: int) -> None:
        self._pos = p
        self.offset = off
        self._next_beacon = nb
        self.beacon_markers = markers

    def _learn_key(self, kb: bytes, offset: int) -> list[Any]:
        if not key_is_valid(kb):
            raise InvalidStreamKeyError(
                f"frame has invalid stream key {bytes(kb)!r}", path=self.path, offset=offset
            )
        name = kb.decode("ascii")
        internal = kb == _EOS_KEY
        wanted = self._internal if internal else (self._keys is None or name in self._keys)
        info: list[Any] = [name, wanted, internal, _NO_SEQ]
        self._key_info[bytes(kb)] = info
        return info

    def _frame_error(
        self,
        ts: int,
        received: int,
        computed: int,
        last_byte: int,
        plen: int,
        head_len: int,
        off: int,
    ) -> StreamFormatError:
        """What is wrong with a frame: first its timestamp, then its checksum, then its end."""
        if ts > MAX_TIMESTAMP_MS:
            return TimestampRangeError(
                f"message timestamp {ts} ms lies after the year 9999", path=self.path, offset=off
            )
        if computed != received:
            return ChecksumError(received=received, computed=computed, path=self.path, offset=off)
        return FrameEndError(
            f"frame of {head_len + plen + 3} bytes (as its size field says) ends with byte "
            f"{last_byte:#04x}, not 0x0d",
            path=self.path,
            offset=off,
        )

    def _follow(self, info: list[Any], kb: bytes, shard: int, seq: int, off: int) -> None:
        """Check ``seq`` against its stream's last one (:meth:`_check_sequence`), then note it."""
        self._check_sequence(info, kb, shard, seq, off)
        if shard == 0:
            info[3] = seq
        elif not info[2]:
            self._shard_seqs[(bytes(kb), shard)] = seq

    def _follow_split(
        self, info: list[Any], kb: bytes, shard: int, seq: int, off: int, met: _Met
    ) -> int:
        """:meth:`_follow` for a frame split by the beacons ``met``, whose markers count it (a
        writer updates them first); returns how many markers they hold."""
        self._check_sequence(info, kb, shard, seq, off)
        markers = 0
        for _, beacon, _ in met:
            if beacon.markers:
                self._check_markers(beacon, off, (kb, shard, seq))
            markers += len(beacon.markers)
        if shard == 0:
            info[3] = seq
        elif not info[2]:
            self._shard_seqs[(bytes(kb), shard)] = seq
        self.last_beacon = (met[-1][0] // self.beacon_interval, met[-1][1])
        return markers

    def _check_sequence(self, info: list[Any], kb: bytes, shard: int, seq: int, off: int) -> None:
        """Raise :class:`SequenceError` unless ``seq`` follows its stream's last one (or is the
        first one seen). Internal messages (the end-of-stream marker: seq 0) are exempt."""
        if info[2]:
            return
        last = info[3] if shard == 0 else self._shard_seqs.get((bytes(kb), shard))
        if last == _NO_SEQ:
            last = None
        if seq == last + 1 if last is not None else (seq <= 1 or not self._whole_file):
            return
        stream = repr(info[0]) + ("" if shard == 0 else f" shard {shard}")
        if last is None:
            raise SequenceError(
                f"the first message of stream {stream} has sequence number {seq}: a stream "
                "starts at 1 (or 0); a damaged sequence number, shard or stream key",
                path=self.path,
                offset=off,
            )
        raise SequenceError(
            f"sequence number {seq} of stream {stream} does not follow {last}, the one before "
            "it: a damaged sequence number, shard or stream key, or a lost frame",
            path=self.path,
            offset=off,
        )

    def _last_seq(self, kb: bytes, shard: int) -> int | None:
        if shard:
            return self._shard_seqs.get((kb, shard))
        info = self._key_info.get(kb)
        return None if info is None or info[3] == _NO_SEQ else int(info[3])

    def _check_markers(
        self, beacon: Beacon, frame_offset: int, current: tuple[bytes, int, int] | None
    ) -> None:
        """A marker states its stream's highest sequence number so far, the frame the beacon
        splits (``current``: key, shard, seq) included: it must be the last one decoded. A
        decoder that read the whole file knows every stream a marker may name."""
        for marker in beacon.markers:
            if marker.stream_key == INTERNAL_KEY:
                continue  # an end-of-stream message it counts may have been overwritten since
            kb = marker.stream_key.encode("ascii")
            if current is not None and current[0] == kb and current[1] == marker.shard:
                last: int | None = current[2]
            else:
                last = self._last_seq(kb, marker.shard)
            if last is None and not self._whole_file:
                continue
            if last != marker.seq:
                stream = repr(marker.stream_key) + (
                    "" if marker.shard == 0 else f" shard {marker.shard}"
                )
                said = "no message" if last is None else f"sequence {last} last"
                raise BeaconError(
                    f"beacon marker says stream {stream} reached sequence {marker.seq}; the "
                    f"frames before it hold {said}",
                    path=self.path,
                    offset=frame_offset,
                )

    def _check_remaining(self, met: _Met, extra: int) -> None:
        """Each beacon met inside a frame must say how many of its bytes follow it."""
        for offset, beacon, left in met:
            if beacon.remaining != left + extra:
                raise BeaconError(
                    f"beacon says {beacon.remaining} bytes of the frame it splits follow it; the "
                    f"frame's size field says {left + extra}",
                    path=self.path,
                    offset=offset,
                )

    def _gather(
        self, buf: bytes, p: int, off: int, nb: int, n: int
    ) -> tuple[bytes, int, int, int, _Met] | None:
        """Collect ``n`` frame bytes from ``buf[p:]`` (offset ``off``), stepping over beacons.

        Returns the bytes, the new buffer index, offset and next-beacon offset, and the beacons
        stepped over (with the frame bytes still to collect after each); None if the buffer ends
        first.
        """
        parts = []
        end = len(buf)
        met: _Met = []
        while n > 0:
            if off == nb:
                parsed = decode_beacon(buf, p, off, self.path)
                if parsed is None:
                    return None
                beacon, size = parsed
                met.append((off, beacon, n))
                p += size
                off += size
                nb += self.beacon_interval
                continue
            take = min(n, nb - off)
            if p + take > end:
                return None
            parts.append(buf[p : p + take])
            p += take
            off += take
            n -= take
        return b"".join(parts), p, off, nb, met
