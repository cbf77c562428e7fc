"""The tip record: what the next writer needs to continue a stream file, kept beside it.

A writer that takes the file's lock and finds the file longer than it left it must learn what the
others appended before it can continue the file exactly (:mod:`.catchup`): each stream's highest
sequence number and timestamp, the running checksums, the markers the beacons have taken so far
(their round-robin) and where the next frame goes. Decoding the others' messages teaches it that,
at the cost of decoding them. The writer that appended them knew it already: so, while it still
holds the lock, it writes that state to ``<file>.tip``, and the next writer reads it instead of
decoding — when, and only when, the record provably describes the file as it is.

**What the record holds** (:class:`Tip`): the file's size when it was written; the position the
next frame goes to (before a trailing end-of-stream message, which the next append overwrites,
else the size); the markers written so far; every (key, shard)'s seq, timestamp and running
checksum, in the beacons' order. That is exactly the state :func:`~.catchup.catch_up` leaves a
writer in after counting the whole file, so adopting it continues the file byte for byte as
decoding would.

**When it is trusted.** A record is adopted only if all of these hold, and ignored otherwise (the
writer then decodes, as without it):

- it decodes whole and its CRC-32 matches (a record torn by a crash, or damaged, is ignored);
- it names this very file: its device and inode, a digest of its header, and the boot of the
  machine (a record from before a reboot is never trusted: a power loss may have kept the record
  and lost the data it describes, which within one boot the page cache rules out);
- its size is the file's size now, and the digest of the file's last bytes (up to 4 KiB) is the
  file's digest now.

**A record of a shorter file** (a writer alone records only every 16 KiB, and one killed
after its data leaves the previous record) still spares the decode of what it describes: if the
file still ends those bytes as the record says (the digest), and the record leaves nothing to
overwrite, the writer adopts it and decodes only what follows. The file never changes below
such a record's size: writers only append after it, overwrite an end-of-stream message or cut a
torn tail that both lie after it, and a repair removes the record first.

**Crash safety.** The record is written only by the lock holder, after its data, in one
``pwrite``: a writer killed before the record leaves the previous one, whose size is no longer
the file's (ignored: the next writer decodes the appended bytes, and cuts away a torn tail as
before); killed during it, a record whose CRC fails (ignored). Bytes are only appended to the
file, except where a trailing end-of-stream message is overwritten or a cut tail is truncated
— each under the lock by a writer that writes a new record after — and by ``trio-streams file
repair``, which removes the record first. So a record whose size and last bytes match the file
describes the bytes before them.

The record is not synced: a process crash loses nothing, and after a power loss the next boot
ignores it. Nothing is written when the record cannot be (a read-only directory): writers then
decode, as they always could.
"""

from __future__ import annotations

import contextlib
import os
import struct
import zlib
from dataclasses import dataclass
from typing import final

from .format import HEADER_SIZE

__all__ = ["TIP_SUFFIX", "Tip", "TipFile", "remove_tip", "tip_path"]

#: The record's name is the stream file's name with this suffix.
TIP_SUFFIX = ".tip"
#: How many of the file's last bytes the record's digest covers (a page).
TAIL_BYTES = 4096
_MAGIC = b"SSTIP\x01"
#: magic, body length.
_HEAD = struct.Struct(">6sI")
#: boot id, device, inode, header CRC, size, position, markers, tail CRC, number of streams.
_FIXED = struct.Struct(">16sQQIQQQII")
#: shard, seq, timestamp, running checksum (after the key's ShortString).
_STREAM = struct.Struct(">QQQH")
_CRC = struct.Struct(">I")
#: Largest record read back.
_MAX_RECORD = 64 << 20


def tip_path(path: str) -> str:
    """Where the tip record of the stream file at ``path`` is kept."""
    return path + TIP_SUFFIX


def _boot_id() -> bytes | None:
    """This boot of the machine (Linux), or None where it cannot be known."""
    try:
        with open("/proc/sys/kernel/random/boot_id", "rb") as f:
            text = f.read().strip().replace(b"-", b"")
        return bytes.fromhex(text.decode("ascii"))[:16].ljust(16, b"\0")
    except (OSError, ValueError):
        return None


_BOOT: bytes | None = _boot_id()


@final
@dataclass(frozen=True, slots=True)
class Tip:
    """The state a writer continues the file from (see the module docs)."""

    #: The file's size the record describes.
    size: int
    #: Where the next frame goes: ``size``, or the start of a trailing end-of-stream message.
    position: int
    #: Markers the beacons have taken so far (drives their round-robin).
    beacon_count: int
    #: (key ShortString, shard, seq, timestamp ms, running checksum), in the beacons' order.
    streams: list[tuple[bytes, int, int, int, int]]

    @property
    def overwrite_at(self) -> int | None:
        """Where a trailing end-of-stream message starts, overwritten by the next append."""
        return self.position if self.position < self.size else None


class TipFile:
    """The tip record of the stream file open as ``fd`` at ``path``: read and written by the
    holder of the file's lock (:meth:`read` is also safe without it: what it returns matched
    the file when it was checked).

    Disabled (every :meth:`read` None, every :meth:`write` nothing) where the machine's boot
    cannot be known or the record cannot be opened."""

    def __init__(self, fd: int, path: str) -> None:
        self._data = fd
        self.path = tip_path(path)
        #: The record's descriptor, opened at the first use (-1: not yet; None: disabled).
        self._fd: int | None = -1
        #: What names the file: (boot, device, inode, header CRC).
        self._identity: tuple[bytes, int, int, int] = (b"", 0, 0, 0)
        try:
            st = os.fstat(fd)
            header = os.pread(fd, HEADER_SIZE, 0)
        except OSError:
            header = b""
        if _BOOT is None or len(header) < HEADER_SIZE:
            self._fd = None
            return
        self._identity = (_BOOT, st.st_dev, st.st_ino, zlib.crc32(header))

    def _open(self, *, create: bool) -> int | None:
        """The record's descriptor, opening it (created if ``create``); None if it cannot be."""
        fd = self._fd
        if fd is None or fd >= 0:
            return fd
        flags = os.O_RDWR | os.O_CLOEXEC | (os.O_CREAT if create else 0)
        try:
            self._fd = fd = os.open(self.path, flags, 0o644)
        except FileNotFoundError:
            return None  # none yet: a writer creates it
        except OSError:
            self._fd = None  # cannot be had (a read-only directory): disabled
            return None
        return fd

    @property
    def enabled(self) -> bool:
        return self._fd is not None

    def _tail_crc(self, size: int) -> int:
        start = max(HEADER_SIZE, size - TAIL_BYTES)
        return zlib.crc32(os.pread(self._data, size - start, start))

    def read(self, size: int, *, known: int | None = None) -> Tip | None:
        """The record, if it describes the file as it is at ``size`` bytes; else None.

        With ``known`` (how far the caller counted the file already), a record of a shorter
        file beyond ``known`` is returned too, if the file still holds the bytes it describes
        and it leaves nothing to overwrite: the caller decodes only what follows it."""
        fd = self._open(create=False)
        if fd is None:
            return None
        try:
            head = os.pread(fd, _HEAD.size + _FIXED.size, 0)
            if len(head) < _HEAD.size + _FIXED.size:
                return None
            magic, length = _HEAD.unpack_from(head)
            if magic != _MAGIC or not _FIXED.size <= length <= _MAX_RECORD:
                return None
            boot, dev, ino, header_crc, recorded, position, markers, tail_crc, count = (
                _FIXED.unpack_from(head, _HEAD.size)
            )
            if (boot, dev, ino, header_crc) != self._identity:
                return None
            if recorded != size and (
                known is None or not known < recorded < size or position != recorded
            ):
                return None
            if not HEADER_SIZE <= position <= recorded:
                return None
            if tail_crc != self._tail_crc(recorded):
                return None
            record = os.pread(fd, _HEAD.size + length + _CRC.size, 0)
        except OSError:
            return None
        if len(record) != _HEAD.size + length + _CRC.size:
            return None
        body = memoryview(record)[_HEAD.size : _HEAD.size + length]
        if zlib.crc32(body) != _CRC.unpack_from(record, _HEAD.size + length)[0]:
            return None
        streams = _decode_streams(body, _FIXED.size, count)
        return None if streams is None else Tip(recorded, position, markers, streams)

    def write(self, tip: Tip) -> None:
        """Record ``tip`` (the lock held, the file ``tip.size`` bytes long, all of it written
        by this writer or counted by it); a record that cannot be written is left out."""
        fd = self._open(create=True)
        if fd is None:
            return
        streams = tip.streams
        fixed = _FIXED.pack(
            *self._identity,
            tip.size,
            tip.position,
            tip.beacon_count,
            self._tail_crc(tip.size),
            len(streams),
        )
        pack = _STREAM.pack
        parts = [fixed]
        for prefix, shard, seq, ts, crc in streams:
            parts += (prefix, pack(shard, seq, ts, crc))
        body = b"".join(parts)
        record = b"".join((_HEAD.pack(_MAGIC, len(body)), body, _CRC.pack(zlib.crc32(body))))
        with contextlib.suppress(OSError):
            os.pwrite(fd, record, 0)

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None and fd >= 0:
            os.close(fd)


def _decode_streams(
    body: memoryview, at: int, count: int
) -> list[tuple[bytes, int, int, int, int]] | None:
    streams = []
    unpack, fixed = _STREAM.unpack_from, _STREAM.size
    end = len(body)
    try:
        for _ in range(count):
            prefix = bytes(body[at : at + 1 + body[at]])
            at += len(prefix)
            shard, seq, ts, crc = unpack(body, at)
            at += fixed
            streams.append((prefix, shard, seq, ts, crc))
    except (IndexError, struct.error):
        return None
    return streams if at == end else None


def remove_tip(path: str) -> None:
    """Remove the tip record of the stream file at ``path`` (before the file is changed other
    than by appending, as a repair does); nothing if there is none."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tip_path(path))
