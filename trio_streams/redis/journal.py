"""The run journal: handler runs written to shared memory before they begin, for no syscall.

Counting an attempt as a handler run means recording each run durably before the handler
starts: a run that never returns (the process was killed, a poison message called
``os._exit``) must still count. A write to Redis or to a socket per run costs a system call per
message, about a third of a no-op consumer's throughput on a small machine. The journal costs a
few stores into a file mapped into memory (``MAP_SHARED``): the page cache holds what the
process wrote the instant it wrote it, and keeps it when the process dies, however it dies.
(A machine that crashes loses it: its runs then go uncounted, never counted twice.)

A journal belongs to one consumer name of one group on one stream of one server, and lives in
:func:`journal_dir` on the host (``TRIO_STREAMS_STATE_DIR``, else the user's runtime directory,
else the temporary directory), named by a digest of those four. The name's lease
(:mod:`.names`) makes its holder the only writer. Its records go to the group's attempt ledger
in Redis with each flush (:mod:`.attempts`); what was recorded after the last one is read back
by the name's next holder on this host at open, before it reads its own pending entries, so a
process restarted on the same host (a crashed worker, a service restarted in place) counts
every run its predecessor made.

Layout (little-endian): a 64-byte header ``b"TSRUNS01"``, the slot count (u32), then at byte 16
the sequence number of the last record sent to Redis (u64); then fixed 64-byte records in a
ring, record ``n`` (from 1) in slot ``(n - 1) % slots``: its number (u64; 0 while it is being
written, so a record a death cut in half is never read), a count (i32: a stream entry's runs so
far; for a list value, a change to its runs), the key's length (u8) and the key (at most 50
bytes: a stream entry's id, at most 41, or a list value's SHA-1 in hex).
"""

from __future__ import annotations

import hashlib
import logging
import mmap
import os
import secrets
import struct
import tempfile
from pathlib import Path

import trio

from .client import RedisClient
from .companions import companion_key
from .wire import text

__all__ = ["RunJournal", "journal_dir", "journal_epoch", "journal_group", "open_journal"]

_log = logging.getLogger("trio_streams.redis")

_MAGIC = b"TSRUNS01"
_HEADER = 64
_RECORD = 64
_MAX_ID = _RECORD - 14
#: Records the ring holds (a power of two): runs recorded beyond this many since the last send
#: to Redis overwrite the oldest (they go uncounted, never counted twice).
SLOTS = 8192

_SEQ = struct.Struct("<Q")
_BODY = struct.Struct("<iB")
_SLOTS = struct.Struct("<I")
#: A record's number, runs and id length, in one store; and its number alone.
_pack_head = struct.Struct("<QiB").pack_into
_pack_number = _SEQ.pack_into
_pack_count = struct.Struct("<i").pack_into


async def journal_epoch(client: RedisClient, key: str, name: str = "") -> str:
    """The epoch of the journals of ``key`` (and group ``name``): a token in Redis, in the
    key's slot, made the first time (its companion ``journal-epoch[:<name>]``). It is part of
    every journal's name, so a journal left on this host for another server at the same
    address, or for a stream or group deleted and made again, is never read back into this
    one."""
    epoch_key = companion_key(key, f"journal-epoch{':' if name else ''}{name}")
    await client.execute("SET", epoch_key, secrets.token_hex(8), "NX")
    return text(await client.execute("GET", epoch_key))


def journal_group(client: RedisClient, *parts: str) -> str:
    """The name a group's journals share: the server (its addresses and database), then
    ``parts`` (the stream or list, the group, the epoch)."""
    config = client.config
    return "|".join((f"{config.addresses!r}/{config.connection.db}", *parts))


async def open_journal(group: str, consumer: str, *, label: str) -> RunJournal | None:
    """``consumer``'s journal (file I/O, in a worker thread); None, with a warning, where it
    cannot be made: every run is then written to Redis before it begins."""
    try:
        return await trio.to_thread.run_sync(RunJournal.open, group, consumer)
    except OSError as exc:
        _log.warning(
            "%s: no run journal (%s): each handler run is written to Redis before it begins, "
            "a round trip per message; set TRIO_STREAMS_STATE_DIR to a writable directory",
            label, exc,
        )  # fmt: skip
        return None


def journal_dir() -> Path:
    """Where this host's run journals live (made on first use, readable by this user only)."""
    explicit = os.environ.get("TRIO_STREAMS_STATE_DIR")
    if explicit:
        return Path(explicit)
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        return Path(runtime) / "trio-streams"
    return Path(tempfile.gettempdir()) / f"trio-streams-{os.getuid()}"


class RunJournal:
    """One consumer's journal (see the module docstring). Not safe for two writers: the
    consumer name's lease makes sure there is one."""

    def __init__(self, path: Path, mapped: mmap.mmap, slots: int, *, fresh: bool) -> None:
        self.path = path
        self._map = mapped
        self._slots = slots
        self._mask = slots - 1
        #: True if the file was made now: nothing a predecessor recorded can be read back.
        self.fresh = fresh
        self._next = self._last_number() + 1

    @classmethod
    def open(cls, group: str, consumer: str, directory: Path | None = None) -> RunJournal:
        """The journal of ``consumer`` in ``group`` (the server, stream and group, as one
        string), made if absent or remade if it is not one. Raises ``OSError`` where the
        directory cannot be written."""
        where = directory if directory is not None else journal_dir()
        where.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = RunJournal.path_of(group, consumer, where)
        size = _HEADER + SLOTS * _RECORD
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fresh = os.fstat(fd).st_size != size
            if fresh:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, size)
            mapped = mmap.mmap(fd, size)
        finally:
            os.close(fd)
        if fresh or mapped[:8] != _MAGIC or _SLOTS.unpack_from(mapped, 8)[0] != SLOTS:
            mapped[:size] = bytes(size)
            mapped[:8] = _MAGIC
            _SLOTS.pack_into(mapped, 8, SLOTS)
            fresh = True
        return cls(path, mapped, SLOTS, fresh=fresh)

    @staticmethod
    def peers(group: str, directory: Path | None = None) -> list[Path]:
        """The journals of every consumer of ``group`` on this host."""
        where = directory if directory is not None else journal_dir()
        return sorted(where.glob(f"{_digest(group)}-*.runs"))

    @staticmethod
    def read_unsent(path: Path, *, summed: bool = False) -> dict[str, int]:
        """What the journal at ``path`` recorded after its last send (read only: another
        consumer's, whose entries this one claimed): each key's latest count, or with
        ``summed`` the sum of its changes; empty if it is not a journal."""
        try:
            with path.open("rb") as file:
                data = file.read()
        except OSError:
            return {}
        if len(data) != _HEADER + SLOTS * _RECORD or data[:8] != _MAGIC:
            return {}
        return _unsent(memoryview(data), SLOTS, summed=summed)

    @staticmethod
    def path_of(group: str, consumer: str, directory: Path | None = None) -> Path:
        """Where the journal of ``consumer`` in ``group`` is (or would be) on this host."""
        where = directory if directory is not None else journal_dir()
        return where / f"{_digest(group)}-{_digest(consumer)}.runs"

    def _last_number(self) -> int:
        last = 0
        mapped = self._map
        for slot in range(self._slots):
            (number,) = _SEQ.unpack_from(mapped, _HEADER + slot * _RECORD)
            if number and (number - 1) % self._slots == slot and number > last:
                last = number
        return last

    def record(self, entry: str, runs: int) -> int:
        """Record that ``entry`` is starting its run number ``runs``; returns the record's
        number. Two stores into memory: durable the instant it returns, whatever kills the
        process next. (The record's number goes in last: a record cut short reads as empty.)"""
        raw = entry.encode()
        size = len(raw)
        if size > _MAX_ID:
            raw, size = raw[:_MAX_ID], _MAX_ID
        number = self._next
        self._next = number + 1
        at = _HEADER + ((number - 1) & self._mask) * _RECORD
        mapped = self._map
        _pack_head(mapped, at, 0, runs, size)
        mapped[at + 13 : at + 13 + size] = raw
        _pack_number(mapped, at, number)
        return number

    def finish(self, number: int) -> None:
        """Record ``number``'s entry as finished (its handler ended, its acknowledgement not
        flushed): its count becomes 0, in place, one store. A record overwritten since (the
        ring went round) is left alone."""
        at = _HEADER + ((number - 1) & self._mask) * _RECORD
        mapped = self._map
        if _SEQ.unpack_from(mapped, at)[0] == number:
            _pack_count(mapped, at + 8, 0)

    @property
    def last(self) -> int:
        """The number of the last record written (0: none)."""
        return self._next - 1

    @property
    def sent(self) -> int:
        """The number of the last record known to be in Redis."""
        return int(_SEQ.unpack_from(self._map, 16)[0])

    def mark_sent(self, number: int) -> None:
        """Every record up to ``number`` is in Redis now."""
        if number > self.sent:
            _SEQ.pack_into(self._map, 16, number)

    def since_sent(self) -> dict[str, int]:
        """What was recorded after the last record sent, the latest runs of each entry: the
        runs a predecessor made that Redis may not have (read once, at open)."""
        return _unsent(memoryview(self._map), self._slots)

    def close(self) -> None:
        """Unmap the file (what was written stays in it)."""
        try:
            self._map.close()
        except (BufferError, ValueError):
            pass


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def _unsent(data: memoryview, slots: int, *, summed: bool = False) -> dict[str, int]:
    """The records of a journal's bytes after its last send: key -> its latest count (or the
    sum of its changes)."""
    (sent,) = _SEQ.unpack_from(data, 16)
    found: list[tuple[int, str, int]] = []
    for slot in range(slots):
        at = _HEADER + slot * _RECORD
        (number,) = _SEQ.unpack_from(data, at)
        if number <= sent or (number - 1) % slots != slot:
            continue
        runs, length = _BODY.unpack_from(data, at + 8)
        if length > _MAX_ID:
            continue
        try:
            entry = bytes(data[at + 13 : at + 13 + length]).decode()
        except UnicodeDecodeError:
            continue
        found.append((number, entry, runs))
    found.sort()
    if summed:
        sums: dict[str, int] = {}
        for _, entry, runs in found:
            sums[entry] = sums.get(entry, 0) + runs
        return sums
    return {entry: runs for _, entry, runs in found}
