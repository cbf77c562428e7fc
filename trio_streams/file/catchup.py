"""Catching up with what other writers appended, so this writer continues the file exactly.

A writer holds the file's lock only while it appends (see :mod:`.writer`). When it takes the lock
and finds the file longer than it left it, others appended meanwhile: :func:`catch_up` decodes
those bytes and counts every message and beacon into the writer's
:class:`~trio_streams.file.encoder.FrameEncoder` as if the writer had written them itself — each
stream's highest sequence number and timestamp, the running checksums of the beacons, the
markers written so far (the round-robin) and the write position. So the file comes out byte for
byte as one writer would have written the same messages in the same order; readers, upstream's
included, cannot tell. Opening an existing file is the same catch-up, from the header on.

What the bytes may end with, as the stream-file contract says for reopening a file:

- an **end-of-stream message** another writer's close wrote: it is taken back and the next append
  overwrites it (:attr:`CatchUp.overwrite_at`);
- a **tail cut short** by a writer that crashed mid-append (nobody else writes while the lock is
  held, so an unfinished frame is not one being written): it is truncated away only when
  :func:`~trio_streams.file.repair.check_cut_tail` proves it holds no message; otherwise a
  :class:`~trio_streams.file.errors.UnprovenTailError` names the offset and the file is left as
  it is (``trio-streams file repair`` moves such a tail aside);
- **corruption** before the end: its typed :class:`~trio_streams.file.errors.StreamFormatError`,
  the file unchanged. In every case the encoder has counted what decoded before the error, so a
  later append after a repair continues from there.

This costs what decoding the new bytes costs, and nothing when nobody else wrote; a writer
reaches for it only when the tip record the others keep beside the file (:mod:`.tip`) does not
describe the file (or, opening it, always: it checks the whole file once). Most of it can
be done before taking the lock (``settled=True``): frames another writer finished never change,
so a writer that finds the file grown decodes what is complete while others append, and then
holds the lock only for the rest.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import final

from .decoder import FrameDecoder, first_beacon_at_or_after
from .encoder import FrameEncoder
from .errors import StreamFormatError
from .format import EOS_PAYLOAD, INTERNAL_KEY, crc16
from .reader import READ_CHUNK
from .repair import check_cut_tail, repair_hint

__all__ = ["CatchUp", "catch_up"]


@final
@dataclass(frozen=True, slots=True)
class CatchUp:
    """What :func:`catch_up` found."""

    #: Messages counted (an end-of-stream message taken back included).
    messages: int
    #: Bytes of a cut tail truncated away.
    truncated: int
    #: Where a trailing end-of-stream message starts, to be overwritten by the next append.
    overwrite_at: int | None


def catch_up(
    fd: int, encoder: FrameEncoder, size: int, *, path: str, settled: bool = False
) -> CatchUp:
    """Count into ``encoder`` the file's bytes from its committed offset up to ``size``.

    The caller holds the file's lock and ``encoder`` holds no batch (see
    :meth:`~trio_streams.file.encoder.FrameEncoder.rollback`). Raises the
    :class:`~trio_streams.file.errors.StreamFormatError` of what does not decode; the encoder
    then stands after the last message that did.

    ``settled=True``, without the lock: count only what no writer can change any more — the
    complete frames before the first end-of-stream message (a later append may overwrite it) —
    and stop quietly at anything else; the catch-up under the lock does the rest.
    """
    start = encoder.committed_offset
    interval = encoder.beacon_interval
    decoder = FrameDecoder(
        interval, start, internal=True, on_eos="hold" if settled else "include", path=path
    )
    count = 0
    trailing_eos = None
    at = start
    try:
        while True:
            try:
                batch = decoder.next_messages(4096)
            except StreamFormatError as exc:
                if settled:
                    break
                exc.add_note(f"{path}: {repair_hint(path)}")
                raise
            if not batch:
                pass
            elif batch[-1].payload == EOS_PAYLOAD and batch[-1].stream_key == INTERNAL_KEY:
                # Possibly the file's last message: what it changes must be taken back then.
                *before, last = batch
                encoder.observe_messages(before)
                trailing_eos = (last.offset, encoder.mark())
                encoder.observe(
                    last.stream_key, last.shard, last.seq, last.timestamp_ms, crc16(last.payload)
                )
            else:
                trailing_eos = None
                encoder.observe_messages(batch)
            count += len(batch)
            if batch:
                continue  # until a call returns nothing: that call raises on corruption
            if at >= size or decoder.held_eos is not None:
                break
            data = os.pread(fd, min(READ_CHUNK, size - at), at)
            if not data:
                break
            at += len(data)
            decoder.feed(data)
    finally:
        encoder.observe_markers(decoder.beacon_markers)
        encoder.move_to(decoder.offset)
    position = decoder.offset
    truncated = 0
    if settled:
        return CatchUp(count, 0, None)
    if size > position:
        # The file ends inside a frame or beacon. Cut it away only if it provably holds no
        # message (a write cut short by a crash): a damaged length field looks the same.
        check_cut_tail(
            lambda offset, n: os.pread(fd, n, offset),
            interval,
            position,
            size,
            path=path,
            streams={(s.key, s.shard): (s.seq, s.ts) for s in encoder.streams()},
        )
        os.ftruncate(fd, position)
        truncated = size - position
    if trailing_eos is None:
        return CatchUp(count, truncated, None)
    eos_at, mark = trailing_eos
    # The beacon an end-of-stream frame may span (or that follows it on a boundary) goes too.
    after = 0
    boundary = first_beacon_at_or_after(eos_at, interval)
    while boundary < position:
        after += os.pread(fd, 6, boundary)[5]
        boundary += interval
    encoder.observe_markers(-after)
    encoder.forget_eos(mark)
    encoder.move_to(eos_at)
    return CatchUp(count, truncated, eos_at)
