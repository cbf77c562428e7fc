"""File faults: damaged copies of a stream file, for tests of what reads it.

A crash cuts a stream file short; a bad disk or a stray write flips a bit or zeroes a range. These
helpers make such copies of a real file, never touching the original, so a test can check that
its app reports the damage (a typed :class:`~trio_streams.file.errors.StreamFormatError` naming
the file and byte offset) instead of handling a garbled message:

- :func:`frame_offsets` — where each frame of the file starts (and its fields, by name);
- :func:`cut_copies` — one copy cut at every byte of a region;
- :func:`flip_bit` — a copy with one bit flipped;
- :func:`zero_range` — a copy with a range of bytes set to zero;
- :func:`damage_frame_header` — a copy with one field of one frame's header damaged.

Everything here is synchronous file I/O on small files, meant for test setup.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, final

from ...file.reader import FileReader

__all__ = [
    "FRAME_FIELDS",
    "FrameField",
    "FrameLocation",
    "cut_copies",
    "damage_frame_header",
    "flip_bit",
    "frame_offsets",
    "zero_range",
]

#: A field of a frame's header, in file order (the payload and its checksum follow them).
FrameField = Literal["key_length", "key", "shard", "seq", "timestamp", "payload_size", "checksum"]
#: Every :data:`FrameField`.
FRAME_FIELDS: tuple[FrameField, ...] = (
    "key_length",
    "key",
    "shard",
    "seq",
    "timestamp",
    "payload_size",
    "checksum",
)

Pathish = str | os.PathLike[str]


@final
@dataclass(frozen=True, slots=True)
class FrameLocation:
    """Where one frame of a stream file lies, and the message it holds.

    ``offset`` is the frame's first byte; ``size`` its bytes (beacons that split it left out).
    ``fields`` maps each :data:`FrameField` to the file offsets of its bytes, which are not
    contiguous when a beacon splits the frame.
    """

    index: int
    offset: int
    size: int
    stream_key: str
    shard: int
    seq: int
    timestamp_ms: int
    payload: bytes
    fields: dict[FrameField, tuple[int, ...]]


def frame_offsets(path: Pathish) -> list[FrameLocation]:
    """Every frame of the (undamaged) stream file at ``path``, in file order.

    Internal messages (the end-of-stream marker among them) are included: they are frames too.
    Raises the reader's typed error if the file is already damaged.
    """
    with FileReader(path, internal=True, on_eos="include") as reader:
        interval = reader.beacon_interval
        messages = list(reader)
    data = Path(path).read_bytes()
    out: list[FrameLocation] = []
    for index, message in enumerate(messages):
        key = message.stream_key.encode()
        size = 32 + len(key) + len(message.payload)
        positions = _frame_byte_offsets(data, message.offset, size, interval)
        k = len(key)
        spans: dict[FrameField, range] = {
            "key_length": range(1),
            "key": range(1, 1 + k),
            "shard": range(1 + k, 9 + k),
            "seq": range(9 + k, 17 + k),
            "timestamp": range(17 + k, 25 + k),
            "payload_size": range(25 + k, 29 + k),
            "checksum": range(size - 3, size - 1),
        }
        fields = {name: tuple(positions[i] for i in span) for name, span in spans.items()}
        out.append(
            FrameLocation(
                index,
                message.offset,
                size,
                message.stream_key,
                message.shard,
                message.seq,
                message.timestamp_ms,
                message.payload,
                fields,
            )
        )
    return out


def _frame_byte_offsets(data: bytes, offset: int, size: int, interval: int) -> list[int]:
    """The file offset of each of a frame's ``size`` bytes, stepping over beacons."""
    positions: list[int] = []
    at = offset
    while len(positions) < size:
        if at > 0 and at % interval == 0:
            at += _beacon_size(data, at)
            continue
        positions.append(at)
        at += 1
    return positions


def _beacon_size(data: bytes, at: int) -> int:
    count = data[at + 5]
    p = at + 6
    for _ in range(count):
        p += 1 + data[p] + 26
    return p + 1 - at


def _copy_name(path: Path, into: Pathish | None, suffix: str) -> Path:
    directory = Path(into) if into is not None else path.parent
    directory.mkdir(parents=True, exist_ok=True)
    return directory / f"{path.stem}.{suffix}{path.suffix}"


def _write(target: Path, data: bytes) -> Path:
    target.write_bytes(data)
    return target


def cut_copies(path: Pathish, region: range, *, into: Pathish) -> Iterator[Path]:
    """Copies of ``path`` cut at each offset of ``region``, one at a time, into ``into``.

    The copy cut at offset ``n`` holds the first ``n`` bytes, as a crash during a write can
    leave the file. Offsets past the file's size are skipped. Each copy is written just before
    it is yielded (``NAME.cut-N.ss``) and removed when the iteration moves on, so a region of
    thousands of bytes needs the disk space of one copy.
    """
    source = Path(path)
    data = source.read_bytes()
    for cut in region:
        if not 0 <= cut <= len(data):
            continue
        target = _write(_copy_name(source, into, f"cut-{cut}"), data[:cut])
        try:
            yield target
        finally:
            target.unlink(missing_ok=True)


def flip_bit(path: Pathish, offset: int, bit: int, *, into: Pathish | None = None) -> Path:
    """A copy of ``path`` with bit ``bit`` (0 = least significant) of byte ``offset`` flipped.

    The copy is ``NAME.flip-OFFSET-BIT.ss`` in ``into`` (default: beside the original)."""
    if not 0 <= bit <= 7:
        raise ValueError(f"bit must be 0..7, not {bit}")
    source = Path(path)
    data = bytearray(source.read_bytes())
    if not 0 <= offset < len(data):
        raise ValueError(f"offset {offset} is outside the file's {len(data)} bytes")
    data[offset] ^= 1 << bit
    return _write(_copy_name(source, into, f"flip-{offset}-{bit}"), bytes(data))


def zero_range(path: Pathish, start: int, stop: int, *, into: Pathish | None = None) -> Path:
    """A copy of ``path`` with bytes ``start..stop`` (stop excluded) set to zero, as a lost
    disk block reads back. The copy is ``NAME.zero-START-STOP.ss``."""
    source = Path(path)
    data = bytearray(source.read_bytes())
    if not 0 <= start <= stop <= len(data):
        raise ValueError(f"range {start}..{stop} is outside the file's {len(data)} bytes")
    data[start:stop] = bytes(stop - start)
    return _write(_copy_name(source, into, f"zero-{start}-{stop}"), bytes(data))


def damage_frame_header(
    path: Pathish,
    frame_index: int,
    field: FrameField,
    *,
    into: Pathish | None = None,
    bit: int = 0,
    byte: int = -1,
) -> Path:
    """A copy of ``path`` with one bit of ``field`` of frame ``frame_index`` flipped.

    ``byte`` picks the field's byte (default its last, the least significant of a number) and
    ``bit`` the bit in it. Frames are counted as :func:`frame_offsets` lists them, internal
    messages included. The copy is ``NAME.frame-INDEX-FIELD.ss``."""
    if field not in FRAME_FIELDS:
        raise ValueError(f"field must be one of {FRAME_FIELDS}, not {field!r}")
    frames = frame_offsets(path)
    if not 0 <= frame_index < len(frames):
        raise ValueError(f"the file has {len(frames)} frames; there is no frame {frame_index}")
    offsets = frames[frame_index].fields[field]
    if not offsets:
        raise ValueError(f"frame {frame_index} has an empty {field}")
    offset = offsets[byte]
    copy = flip_bit(path, offset, bit, into=into)
    return copy.replace(_copy_name(Path(path), into, f"frame-{frame_index}-{field}"))
