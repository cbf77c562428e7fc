"""Telling a tail cut short by a crash from a damaged one, and moving an unreadable tail aside.

A writer that reopens a file must not leave a half-written frame behind, but it must never throw
away bytes that may hold messages either: a corrupt length field makes a frame *look* as if it ran
past the end of the file. :func:`check_cut_tail` decides; it lets the writer cut the tail away
only when the tail provably holds no message (the rule is spelled out in its docstring and in
``docs/guides/stream-files.md``), and otherwise raises
:class:`~trio_streams.file.errors.UnprovenTailError`.

:func:`plan_repair` and :func:`apply_repair` are ``trio-streams file repair``: find the first
byte from which the file no longer decodes, copy everything from there to a side file (written
and fsynced first, never overwriting one) and only then truncate the file there.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from .decoder import FrameDecoder, first_beacon_at_or_after
from .errors import StreamFileError, StreamFormatError, UnprovenTailError
from .format import (
    FRAME_FIXED,
    HEADER_SIZE,
    MAX_STREAM_KEY_BYTES,
    MAX_TIMESTAMP_MS,
    crc16,
    decode_header,
    is_header_prefix,
    key_is_valid,
    markers_per_beacon,
)
from .reader import READ_CHUNK, max_beacon_bytes
from .tip import remove_tip

#: Longest tail checked byte by byte when no beacon vouches for the cut frame's length. Beyond it
#: the writer refuses (a tail without a beacon in it is at most about one interval long, so this
#: only matters for intervals above 16 MiB).
MAX_UNCONFIRMED_TAIL = 16 << 20

#: Most beacons checked in a tail (each must be one a writer could have written): a tail with
#: more is refused (at the default interval that is a frame cut after 256 GiB).
MAX_TAIL_BEACONS = 1 << 18

#: ``read(offset, n)``: up to ``n`` bytes of the file at ``offset`` (fewer at its end).
Read = Callable[[int, int], bytes]
#: What the scan before the tail found per (stream key, shard): (highest seq, highest ts).
Streams = Mapping[tuple[str, int], tuple[int, int]]

_unpack_fixed = FRAME_FIXED.unpack_from
_U32 = struct.Struct(">I")
_MARKER_FIXED = struct.Struct(">QQQH")
#: Smallest frame: empty key and payload.
_MIN_FRAME = 32


def repair_hint(path: str) -> str:
    return f"nothing was changed; `trio-streams file repair {path}` moves the unreadable part aside"


# -- proving a tail was cut --------------------------------------------------------------------


def check_cut_tail(
    read: Read,
    interval: int,
    start: int,
    size: int,
    *,
    path: str | None,
    streams: Streams,
) -> None:
    """Return if the bytes ``start..size`` provably hold no message; raise otherwise.

    ``start`` is where decoding stopped (a frame or, at a multiple of ``interval``, a beacon
    start) and ``streams`` what the file holds before it. The tail is provably cut when:

    1. what is present of the frame (or beacon) there is a plausible beginning: a key of at most
       249 valid characters, a timestamp before the year 10000; a beacon between two frames says
       0 bytes remain;
    2. every beacon inside the tail (at most :data:`MAX_TAIL_BEACONS`) is one a writer could have
       written: 0x0D at both ends, no more markers than a writer puts in one at this interval nor
       than there are streams, markers naming distinct streams the file holds (or the cut
       frame's), each at most at that stream's highest seq and timestamp;
    3. every beacon inside the tail says exactly as many bytes of the frame remain as the frame's
       length field implies (a cut beacon, as far as it goes, too); and
    4. either one such complete beacon vouches for the length, or, checking every byte of the
       tail (at most :data:`MAX_UNCONFIRMED_TAIL`): no complete frame with a valid key, timestamp
       and checksum (and the final 0x0D) starts anywhere inside it, and none ends exactly where
       the tail ends, whatever the frame's key length or payload size field say.

    Otherwise :class:`UnprovenTailError` names the path, ``start`` and the reason.
    """
    if size <= start:
        return
    if start > 0 and start % interval == 0:
        _check_cut_beacon(read, interval, start, size, path, streams)
    else:
        _check_cut_frame(read, interval, start, size, path, streams)


def _refuse(path: str | None, start: int, size: int, why: str) -> UnprovenTailError:
    return UnprovenTailError(
        f"the last {size - start} bytes do not decode and are not provably a write cut short by "
        f"a crash: {why}; {repair_hint(path or '<file>')}",
        why=why,
        path=path,
        offset=start,
    )


class _BeaconPrefix(NamedTuple):
    """What is present of a beacon (its size if complete, else None), parsed for structure."""

    size: int | None
    remaining: int | None
    marker_count: int | None
    #: (key, shard, seq, ts) of the complete markers.
    markers: list[tuple[bytes, int, int, int]]
    #: The key bytes present of a marker cut by the end of the bytes: (key length, bytes).
    partial: tuple[int, bytes] | None
    #: A reason the bytes cannot be a beacon whatever the file holds, or None.
    problem: str | None


def _beacon_prefix(data: bytes) -> _BeaconPrefix:
    n = len(data)
    remaining = _U32.unpack_from(data, 1)[0] if n >= 5 else None
    count = data[5] if n >= 6 else None
    markers: list[tuple[bytes, int, int, int]] = []

    def result(
        size: int | None, partial: tuple[int, bytes] | None = None, problem: str | None = None
    ) -> _BeaconPrefix:
        return _BeaconPrefix(size, remaining, count, markers, partial, problem)

    if n and data[0] != 0x0D:
        return result(None, None, f"byte {data[0]:#04x} where a beacon starts with 0x0d")
    if count is None:
        return result(None)
    p = 6
    for _ in range(count):
        if p >= n:
            return result(None)
        klen = data[p]
        if p + 1 + klen + 26 > n:
            return result(None, (klen, bytes(data[p + 1 : min(n, p + 1 + klen)])))
        shard, seq, ts, _ = _MARKER_FIXED.unpack_from(data, p + 1 + klen)
        markers.append((bytes(data[p + 1 : p + 1 + klen]), shard, seq, ts))
        p += 1 + klen + 26
    if p >= n:
        return result(None)
    if data[p] != 0x0D:
        return result(None, None, f"byte {data[p]:#04x} where a beacon ends with 0x0d")
    return result(p + 1)


def _beacon_problem(beacon: _BeaconPrefix, interval: int, streams: Streams | None) -> str | None:
    """Why ``beacon`` cannot have been written after the frames of ``streams`` (None: the
    streams are not known, only the structure is checked)."""
    if beacon.problem is not None:
        return beacon.problem
    if beacon.marker_count is None:
        return None
    limit = markers_per_beacon(interval)
    if streams is not None:
        limit = min(limit, len(streams))
    if beacon.marker_count > limit:
        return f"a beacon with {beacon.marker_count} markers (a writer puts at most {limit} in it)"
    named: set[tuple[bytes, int]] = set()
    for key, shard, seq, ts in beacon.markers:
        if not key_is_valid(key):
            return f"a beacon marker has the invalid stream key {key!r}"
        if ts > MAX_TIMESTAMP_MS:
            return f"a beacon marker has the timestamp {ts} ms, after the year 9999"
        if streams is None:
            continue
        known = streams.get((key.decode("ascii"), shard))
        if known is None or (key, shard) in named:
            return f"a beacon marker names stream {key!r} shard {shard}, not one it can name"
        if seq > known[0] or ts > known[1]:
            return f"a beacon marker says stream {key!r} reached seq {seq} and {ts} ms"
        named.add((key, shard))
    if beacon.partial is not None:
        klen, present = beacon.partial
        if streams is None:
            if not key_is_valid(present):
                return f"a beacon marker has the invalid stream key {present!r}"
        elif not any(len(k) == klen and k.encode()[: len(present)] == present for k, _ in streams):
            return f"a beacon marker starts {klen} {present!r}, no stream the file holds"
    return None


def _check_cut_beacon(
    read: Read, interval: int, start: int, size: int, path: str | None, streams: Streams
) -> None:
    """The tail starts at a beacon due between two frames."""
    if size - start >= max_beacon_bytes(interval):
        raise _refuse(path, start, size, "it is longer than any beacon at this interval")
    raw = read(start, size - start)
    beacon = _beacon_prefix(raw)
    problem = _beacon_problem(beacon, interval, streams)
    if problem is not None:
        raise _refuse(path, start, size, problem)
    if beacon.remaining not in (None, 0):
        raise _refuse(
            path,
            start,
            size,
            f"the beacon between two frames says {beacon.remaining} bytes of a frame remain",
        )
    if beacon.size is not None:
        raise _refuse(
            path, start, size, "a complete beacon is followed by bytes that do not decode"
        )
    _no_frame_inside(raw, 1, path, start, size, lambda i: start + i)


class _Segment(NamedTuple):
    offset: int  # file offset of the first frame byte
    length: int


#: A beacon in a tail: its offset, its parsed prefix, and the frame bytes of the tail before it.
_TailBeacon = tuple[int, _BeaconPrefix, int]


def _tail_layout(
    read: Read, interval: int, start: int, size: int, path: str | None
) -> tuple[list[_Segment], list[_TailBeacon], tuple[int, bytes] | None]:
    """Split the tail from ``start`` into the frame bytes between its beacons (segments) and
    the beacons themselves, and the beacon cut by the end of the file with its bytes, if one
    is; refuse a beacon longer than a writer writes and a tail of too many beacons."""
    segments: list[_Segment] = []
    beacons: list[_TailBeacon] = []
    logical = 0
    at = start
    boundary = first_beacon_at_or_after(start, interval)
    while True:
        if boundary >= size:
            segments.append(_Segment(at, size - at))
            return segments, beacons, None
        segments.append(_Segment(at, boundary - at))
        logical += boundary - at
        raw = read(boundary, min(max_beacon_bytes(interval), size - boundary))
        beacon = _beacon_prefix(raw)
        if beacon.size is None and boundary + len(raw) < size:
            why = f"the beacon at byte {boundary} is longer than any a writer writes"
            raise _refuse(path, start, size, why)
        beacons.append((boundary, beacon, logical))
        if beacon.size is None:
            return segments, beacons, (boundary, raw)
        at = boundary + beacon.size
        boundary += interval
        if len(beacons) > MAX_TAIL_BEACONS:
            raise _refuse(path, start, size, "it holds too many beacons to check")


def _check_cut_frame(
    read: Read, interval: int, start: int, size: int, path: str | None, streams: Streams
) -> None:
    """The tail starts at a frame that the bytes present do not complete."""
    klen = read(start, 1)[0]
    if klen > MAX_STREAM_KEY_BYTES:
        raise _refuse(path, start, size, f"the frame's key length {klen} is above 249")
    head_len = 1 + klen + FRAME_FIXED.size
    segments, beacons, cut = _tail_layout(read, interval, start, size, path)
    logical = sum(segment.length for segment in segments)
    head = _frame_head(read, segments, head_len, path, start, size) if logical >= head_len else None
    known = None if head is None else _with_frame(streams, head)
    for offset, beacon, written in beacons:
        problem = _beacon_problem(beacon, interval, known)
        if problem is not None:
            raise _refuse(path, start, size, f"at byte {offset}: {problem}")
        if beacon.remaining is None:
            continue
        if head is not None:
            expected = head[4] - written
            if beacon.remaining != expected:
                raise _refuse(
                    path,
                    start,
                    size,
                    f"the frame's length field says {expected} bytes follow the beacon at byte "
                    f"{offset}, which says {beacon.remaining}",
                )
        elif beacon.remaining <= logical - written:
            raise _refuse(
                path, start, size, f"the beacon at byte {offset} says the frame ended before it"
            )
    if head is not None and any(b.size is not None for _, b, _ in beacons):
        return  # a complete beacon vouches for the length the frame declares
    if logical > MAX_UNCONFIRMED_TAIL:
        raise _refuse(path, start, size, "it is too long to check without a beacon in it")
    data = _gather(read, segments, logical)
    if head is None and not key_is_valid(data[1 : 1 + klen]):
        raise _refuse(path, start, size, f"the frame's key {data[1 : 1 + klen]!r} is invalid")
    _no_frame_ending_at_end(data, path, start, size, segments)
    _no_frame_inside(data, 1, path, start, size, lambda i: _file_offset(segments, i))
    if cut is not None:
        boundary, raw = cut
        _no_frame_inside(raw, 1, path, start, size, lambda i: boundary + i)


def _with_frame(streams: Streams, head: tuple[str, int, int, int, int]) -> Streams:
    """The streams a beacon written while this frame was written may name (it counts the frame)."""
    key, shard, seq, ts, _ = head
    known = streams.get((key, shard), (0, 0))
    out = dict(streams)
    out[(key, shard)] = (max(known[0], seq), max(known[1], ts))
    return out


def _frame_head(
    read: Read,
    segments: list[_Segment],
    head_len: int,
    path: str | None,
    start: int,
    size: int,
) -> tuple[str, int, int, int, int]:
    head = _gather(read, segments, head_len)
    klen = head[0]
    raw_key = head[1 : 1 + klen]
    if not key_is_valid(raw_key):
        raise _refuse(path, start, size, f"the frame's key {bytes(raw_key)!r} is invalid")
    shard, seq, ts, plen = _unpack_fixed(head, 1 + klen)
    if ts > MAX_TIMESTAMP_MS:
        raise _refuse(path, start, size, f"the frame's timestamp {ts} ms is after the year 9999")
    return raw_key.decode("ascii"), shard, seq, ts, head_len + plen + 3


def _gather(read: Read, segments: list[_Segment], n: int) -> bytes:
    """The first ``n`` frame bytes of the tail (beacons left out)."""
    parts = []
    for segment in segments:
        if n <= 0:
            break
        take = min(n, segment.length)
        parts.append(read(segment.offset, take))
        n -= take
    return b"".join(parts)


def _file_offset(segments: list[_Segment], index: int) -> int:
    for segment in segments:
        if index < segment.length:
            return segment.offset + index
        index -= segment.length
    return segments[-1].offset + segments[-1].length + index


def _no_frame_ending_at_end(
    data: bytes, path: str | None, start: int, size: int, segments: list[_Segment]
) -> None:
    """Refuse if the tail is one complete frame whose key length or size field was damaged."""
    end = len(data)
    declared_klen = data[0]
    crc_at = end - 3
    if crc_at < _MIN_FRAME - 3 or data[end - 1] != 0x0D:
        return  # every writer ends a frame with 0x0D
    received = (data[crc_at] << 8) | data[crc_at + 1]
    for klen in range(MAX_STREAM_KEY_BYTES + 1):
        payload_at = 1 + klen + FRAME_FIXED.size
        if payload_at > crc_at:
            break
        if klen != declared_klen:
            if _U32.unpack_from(data, payload_at - 4)[0] != crc_at - payload_at:
                continue
            if not key_is_valid(data[1 : 1 + klen]):
                continue
        if crc16(data[payload_at:crc_at]) == received:
            what = "length field" if klen == declared_klen else "key length"
            raise _refuse(
                path,
                start,
                size,
                f"it holds a complete frame with a valid checksum, ending at byte "
                f"{_file_offset(segments, end - 1) + 1}, if its {what} is wrong",
            )


def _no_frame_inside(
    data: bytes,
    first: int,
    path: str | None,
    start: int,
    size: int,
    where: Callable[[int], int],
) -> None:
    """Refuse if a complete, checksum-valid frame starts at ``data[first:]``."""
    found = find_frame(data, first)
    if found is not None:
        raise _refuse(
            path,
            start,
            size,
            f"a complete frame with a valid checksum starts inside it, at byte {where(found)}",
        )


def find_frame(data: bytes, first: int = 0) -> int | None:
    """The first index ≥ ``first`` where a complete frame with a valid key, timestamp and
    checksum, ending with 0x0D as writers end frames, starts in ``data`` (contiguous frame bytes,
    beacons removed); None if there is none.
    """
    n = len(data)
    valid = key_is_valid
    unpack = _unpack_fixed
    for s in range(first, n - _MIN_FRAME + 1):
        klen = data[s]
        payload_at = s + 29 + klen
        if klen > MAX_STREAM_KEY_BYTES or payload_at + 3 > n:
            continue
        _, _, ts, plen = unpack(data, s + 1 + klen)
        crc_at = payload_at + plen
        if crc_at + 3 > n or data[crc_at + 2] != 0x0D or ts > MAX_TIMESTAMP_MS:
            continue
        if klen and not valid(data[s + 1 : s + 1 + klen]):
            continue
        if crc16(data[payload_at:crc_at]) == (data[crc_at] << 8) | data[crc_at + 1]:
            return s
    return None


# -- repairing ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class RepairPlan:
    """What ``trio-streams file repair`` found and would do."""

    path: str
    size: int
    #: Everything before this offset decodes; None when the whole file does.
    offset: int | None
    #: Messages (end-of-stream and other internal ones included) before ``offset``.
    messages: int
    #: Why decoding stopped at ``offset``.
    reason: str
    #: Where the tail would go.
    side_file: str

    @property
    def tail_bytes(self) -> int:
        return 0 if self.offset is None else self.size - self.offset


def side_file_name(path: str, offset: int) -> str:
    """``PATH.tail-OFFSET``, or ``PATH.tail-OFFSET.N`` with the first N not taken."""
    base = f"{path}.tail-{offset}"
    name, n = base, 0
    while os.path.lexists(name):
        n += 1
        name = f"{base}.{n}"
    return name


def plan_repair(path: str | os.PathLike[str], fd: int | None = None) -> RepairPlan:
    """Scan the file at ``path`` (through ``fd`` if given) and say what a repair would do."""
    path = os.fspath(path)
    own = fd is None
    if fd is None:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            raise StreamFileError(f"cannot open: {exc.strerror}", path=path) from exc
    try:
        size = os.fstat(fd).st_size
        if size == 0:  # created, and cut before its header: the next writer writes one
            return RepairPlan(path, 0, None, 0, "empty", side_file_name(path, 0))
        if size < HEADER_SIZE and is_header_prefix(os.pread(fd, size, 0)):
            # A writer killed while it created the file: nothing but the start of a header.
            return RepairPlan(
                path,
                size,
                0,
                0,
                f"the file ends {size} bytes into its {HEADER_SIZE}-byte header, a header write "
                "cut short by a crash; it holds no message (the next writer writes a new header)",
                side_file_name(path, 0),
            )
        header = decode_header(os.pread(fd, HEADER_SIZE, 0), path)
        decoder = FrameDecoder(
            header.beacon_interval, HEADER_SIZE, internal=True, on_eos="include", path=path
        )
        count = 0
        at = HEADER_SIZE
        reason = ""
        streams: dict[tuple[str, int], tuple[int, int]] = {}
        while True:
            try:
                batch = decoder.next_messages(4096)
            except StreamFormatError as exc:
                reason = exc.reason
                if exc.offset is not None and exc.offset != decoder.offset:
                    reason += f" (byte {exc.offset})"
                break
            count += len(batch)
            for m in batch:
                seq, ts = streams.get((m.stream_key, m.shard), (0, 0))
                streams[(m.stream_key, m.shard)] = (max(seq, m.seq), max(ts, m.timestamp_ms))
            if batch:
                continue
            data = os.pread(fd, READ_CHUNK, at) if at < size else b""
            if not data:
                if decoder.offset < size:
                    reason = _why_undecoded(
                        fd, header.beacon_interval, decoder.offset, size, path, streams
                    )
                break
            at += len(data)
            decoder.feed(data)
    finally:
        if own:
            os.close(fd)
    offset = decoder.offset if decoder.offset < size else None
    return RepairPlan(
        path,
        size,
        offset,
        count,
        reason,
        side_file_name(path, decoder.offset) if offset is not None else "",
    )


def _why_undecoded(
    fd: int, interval: int, start: int, size: int, path: str, streams: Streams
) -> str:
    what = "beacon" if start % interval == 0 else "frame"
    reason = f"the file ends {size - start} bytes into a {what}"
    try:
        check_cut_tail(
            lambda offset, n: os.pread(fd, n, offset),
            interval,
            start,
            size,
            path=path,
            streams=streams,
        )
    except UnprovenTailError as exc:
        return f"{reason}, not provably a write cut short by a crash: {exc.why}"
    return f"{reason}, a write cut short by a crash (a writer would cut it away too)"


def apply_repair(plan: RepairPlan, fd: int) -> str:
    """Move the tail of ``plan`` to a new side file (fsynced), then truncate ``fd``; returns the
    side file's name. ``fd`` is the file, opened for writing and locked, unchanged since the plan.
    """
    if plan.offset is None:
        return ""
    if os.fstat(fd).st_size != plan.size:
        raise StreamFileError("the file changed since it was scanned", path=plan.path)
    side = side_file_name(plan.path, plan.offset)
    try:
        out = os.open(side, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StreamFileError(
            f"cannot create side file {side}: {exc.strerror}", path=plan.path
        ) from exc
    try:
        at = plan.offset
        while at < plan.size:
            chunk = os.pread(fd, min(READ_CHUNK * 4, plan.size - at), at)
            if not chunk:
                raise StreamFileError("the file shrank while it was copied", path=plan.path)
            view = memoryview(chunk)
            while view:
                view = view[os.write(out, view) :]
            at += len(chunk)
        os.fsync(out)
        if os.fstat(out).st_size != plan.size - plan.offset:
            raise StreamFileError(f"side file {side} came out short", path=plan.path)
    finally:
        os.close(out)
    _fsync_directory(side)
    remove_tip(plan.path)  # it describes the bytes about to go
    os.ftruncate(fd, plan.offset)
    os.fsync(fd)
    return side


def _fsync_directory(path: str) -> None:
    directory = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_CLOEXEC)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)
