"""Resumable consumers: where a named consumer of a stream file got to, kept beside the file.

Nothing in a stream file records how far a reader got, so ``FileStream(key, durable="name")``
keeps it itself, in ``<file>.consumers/<name>.json``:

- **What is stored** is a watermark: the last message of the longest run, in reading order, of
  messages that have all settled. With several workers settles finish out of order, so "the
  last settled message" would skip the ones still in a handler; the watermark never passes a
  message that has not settled. A message abandoned without an outcome (cancelled at shutdown,
  the process killed) holds it back, so it is delivered again after a restart: at-least-once.
- **How it is stored**: JSON written to a temporary file and renamed over the old one, so a
  crash leaves the old state or the new one, never half of either. It is written when the
  watermark has moved and either ``PERSIST_EVERY`` messages or ``PERSIST_INTERVAL`` seconds
  have passed, when the subscription waits for the file to grow, and when it closes (then with
  an fsync). Never per message: a restart after a crash redelivers what settled since the last
  write, and skips nothing.
- **Who may use it**: one consumer at a time. ``<name>.lock`` is held with ``flock`` while the
  subscription runs; a second consumer with the same name, in this process or another, gets
  :class:`DurableLockedError`. The kernel drops the lock when a process dies, however it dies.
  A consumer of a file no writer has created yet holds the lock while it waits, so a second
  copy is refused at its start; if the file never comes, the lock file (and the directory, if
  empty) is removed as the consumer stops: nothing is left beside a file that is not there.
- **Which file it belongs to**: the state names the file's creation time (from its header), so
  a store left over from a file that was deleted and created anew is refused, not misapplied.

Resuming seeks to the stored message (``Position.sequence(seq, stream=key)`` is inclusive) and
skips it, so every message after it in the file is read, of every key the subscription reads.
Before anything has settled, the store holds the byte offset where the consumer first started
(the tip, for a live consumer), so messages written while it was down are not skipped either.

**A seek moves the stored position with it**, at once: the store then holds the byte offset the
seek landed on, until a message read there settles. A restart resumes where the handler moved
the reader — nothing after that skipped, nothing the handler skipped past read again — and the
settles of deliveries read before the seek (the seeking delivery's own included) no longer move
it back.
"""

from __future__ import annotations

import fcntl
import json
import os
import re
from collections import deque
from dataclasses import dataclass
from typing import Any

from ..core.delivery import Delivery
from ..core.errors import ConfigurationError
from .errors import StreamFileError
from .format import HEADER_SIZE

__all__ = [
    "PERSIST_EVERY",
    "PERSIST_INTERVAL",
    "DurableLockedError",
    "DurableStateError",
    "DurableStore",
    "StoredPosition",
    "Watermark",
    "check_consumer_name",
    "consumer_name_of",
    "drop_lock",
    "store_directory",
    "take_lock",
]

#: Messages settled between two writes of the store, at most.
PERSIST_EVERY = 10_000
#: Seconds between two writes of the store, at most, while the watermark moves.
PERSIST_INTERVAL = 0.2
#: Version of the JSON layout.
_FORMAT = 1
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*")


class DurableStateError(StreamFileError):
    """A consumer's stored position cannot be used: unreadable, or not for this file."""


class DurableLockedError(StreamFileError):
    """Another consumer with the same name (in this process or another) is running."""

    advice = (
        "is another instance of this app running? A durable consumer runs once at a time: stop "
        "the other one, or give this one another durable= name"
    )


def check_consumer_name(name: object) -> str:
    """A durable consumer name becomes a file name: letters, digits, ``.``, ``_``, ``-``."""
    if not isinstance(name, str) or len(name) > 200 or not _NAME.fullmatch(name):
        raise ConfigurationError(
            f"durable consumer name {name!r} must be 1-200 characters of [A-Za-z0-9._-], "
            "not starting with '.'"
        )
    return name


def consumer_name_of(target: str) -> str:
    """The durable consumer name of the subscription ``target`` names (``<app>/<subscription>``,
    unique in its app, with ``#n`` where its name repeats): ``<app>.<subscription>``, ``#n``
    as ``.n``, and any other character a name cannot hold as ``_`` (a leading ``.`` too).
    ``ConfigurationError`` if it is longer than a name may be."""
    name = re.sub(r"[^A-Za-z0-9._-]", "_", target.replace("/", ".").replace("#", "."))
    if name.startswith("."):
        name = "_" + name[1:]
    try:
        return check_consumer_name(name)
    except ConfigurationError:
        raise ConfigurationError(
            f"the durable consumer name {name!r}, made of app and subscription {target!r}, is "
            "longer than 200 characters: give the subscription a shorter name=, or "
            "FileStream(key, durable='name')"
        ) from None


def store_directory(stream_path: str) -> str:
    """Where the consumers of the stream file at ``stream_path`` keep their positions."""
    return stream_path + ".consumers"


@dataclass(frozen=True, slots=True)
class StoredPosition:
    """Where a consumer resumes: right after message ``sequence`` of ``stream`` (and ``shard``,
    when not 0; the last of the settled run), or at byte ``offset``: where it first started,
    before it has settled anything, or where a seek moved it, before it settled anything there.
    """

    stream: str | None = None
    sequence: int | None = None
    offset: int | None = None
    shard: int | None = None

    @classmethod
    def after(cls, stream: str, sequence: int, shard: int | None = None) -> StoredPosition:
        return cls(stream, sequence, shard=shard or None)

    @classmethod
    def at_offset(cls, offset: int) -> StoredPosition:
        return cls(offset=offset)


def take_lock(stream_path: str, name: str) -> int:
    """Hold consumer ``name``'s lock of ``stream_path`` (``flock`` of ``<name>.lock`` beside
    it): the descriptor, to close to release it. :class:`DurableLockedError` if another
    consumer of that name holds it, in this process or another.

    A lock file may be removed by its holder (:func:`drop_lock`, for a file that never came), so
    a lock taken on a file that is no longer at its path is let go and taken again: two holders
    can never hold two files of one name."""
    name = check_consumer_name(name)
    directory = store_directory(stream_path)
    lock_path = os.path.join(directory, name + ".lock")
    while True:
        try:
            os.makedirs(directory, exist_ok=True)
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
        except OSError as exc:
            raise DurableStateError(
                f"cannot open the store of consumer {name!r}: {exc.strerror}", path=directory
            ) from exc
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise DurableLockedError(
                f"durable consumer {name!r} is already running (its lock is held)",
                path=stream_path,
            ) from None
        try:
            same = os.stat(lock_path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # removed by the holder that just let it go: take the new one


def drop_lock(stream_path: str, name: str, fd: int) -> None:
    """Let go of a lock :func:`take_lock` gave, removing its file (and the store's directory,
    if nothing else is in it): for a consumer whose stream file never came, which has nothing
    to keep. The file is removed while it is still held (see :func:`take_lock`)."""
    directory = store_directory(stream_path)
    try:
        os.unlink(os.path.join(directory, name + ".lock"))
        os.rmdir(directory)  # only if empty: another consumer's state stays
    except OSError:
        pass
    finally:
        os.close(fd)


class DurableStore:
    """The stored position of one named consumer of one stream file, and its lock."""

    def __init__(
        self,
        stream_path: str,
        name: str,
        *,
        file_created_at_ms: int,
        lock_fd: int | None = None,
    ) -> None:
        """``lock_fd``: the consumer's lock, taken already (:func:`take_lock`: a consumer of a
        file not created yet holds it while it waits); the store owns it from here on."""
        self.name = check_consumer_name(name)
        self.stream_path = stream_path
        directory = store_directory(stream_path)
        self.path = os.path.join(directory, name + ".json")
        self._temp = self.path + ".tmp"
        self._created_at = file_created_at_ms
        self._lock_fd = take_lock(stream_path, name) if lock_fd is None else lock_fd
        try:
            self.stored = self._load()
        except BaseException:
            os.close(self._lock_fd)
            raise
        self._saved = self.stored

    def _load(self) -> StoredPosition | None:
        try:
            with open(self.path, "rb") as file:
                raw = file.read()
        except FileNotFoundError:
            return None
        try:
            state: Any = json.loads(raw)
            if not isinstance(state, dict) or state.get("format") != _FORMAT:
                raise ValueError(f"not a format {_FORMAT} consumer state")
            created = state["file_created_at_ms"]
            stream, sequence, offset = state["stream"], state["sequence"], state["offset"]
            shard = state.get("shard")
            if shard is not None and not (_is_int(shard) and shard >= 0):
                raise ValueError("shard is not a non-negative integer")
            if not _is_int(created):
                raise ValueError("file_created_at_ms is not an integer")
            if stream is None and sequence is None and _is_int(offset) and offset >= HEADER_SIZE:
                position = StoredPosition.at_offset(offset)
            elif isinstance(stream, str) and _is_int(sequence) and sequence >= 0 and offset is None:
                position = StoredPosition.after(stream, sequence, shard)
            else:
                raise ValueError("neither a stream and sequence number nor a file offset")
        except (ValueError, KeyError, TypeError) as exc:
            raise DurableStateError(
                f"consumer state is unreadable ({exc}); remove it to start over", path=self.path
            ) from None
        if created != self._created_at:
            raise DurableStateError(
                f"consumer state belongs to a stream file created at {created} ms, but "
                f"{self.stream_path} was created at {self._created_at} ms; remove the state to "
                "start over on the new file",
                path=self.path,
            )
        return position

    def save(self, position: StoredPosition, *, sync: bool = False) -> None:
        """Replace the stored state atomically (temporary file, then rename)."""
        if position == self._saved and not sync:
            return
        state = {
            "format": _FORMAT,
            "file": os.path.basename(self.stream_path),
            "file_created_at_ms": self._created_at,
            "stream": position.stream,
            "sequence": position.sequence,
            "offset": position.offset,
        }
        if position.shard is not None:
            state["shard"] = position.shard
        data = json.dumps(state).encode() + b"\n"
        try:
            fd = os.open(self._temp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC, 0o644)
            try:
                os.write(fd, data)
                if sync:
                    os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(self._temp, self.path)
            if sync:
                directory = os.open(os.path.dirname(self.path), os.O_RDONLY | os.O_CLOEXEC)
                try:
                    os.fsync(directory)
                finally:
                    os.close(directory)
        except OSError as exc:
            raise DurableStateError(
                f"cannot write the consumer state: {exc.strerror}", path=self.path
            ) from exc
        self._saved = position

    def close(self) -> None:
        """Release the lock (the state stays)."""
        if self._lock_fd >= 0:
            fd, self._lock_fd = self._lock_fd, -1
            os.close(fd)


class Watermark:
    """Deliveries in reading order, and the last one of the run that has all settled.

    ``track`` numbers each delivery as it is read (the number is the delivery's ``handle``);
    ``settled`` marks one done and moves the watermark over every settled delivery at the front.
    ``restart`` forgets what is in flight (after a seek: those deliveries were read elsewhere
    and their settles no longer move anything).
    """

    __slots__ = ("_base", "_done", "_read", "committed", "moved")

    def __init__(self, committed: StoredPosition) -> None:
        #: Number of the first delivery still tracked.
        self._base = 0
        self._read: deque[Delivery] = deque()
        self._done: deque[bool] = deque()
        self.committed = committed
        #: Deliveries the watermark has moved over since ``moved`` was last reset.
        self.moved = 0

    def track(self, delivery: Delivery) -> int:
        self._read.append(delivery)
        self._done.append(False)
        return self._base + len(self._read) - 1

    def settled(self, number: int) -> bool:
        """Mark delivery ``number`` settled; True if the watermark moved."""
        index = number - self._base
        done = self._done
        if index < 0 or index >= len(done):
            return False  # read before a seek
        done[index] = True
        if index:
            return False
        read = self._read
        last = read[0]
        while done and done[0]:
            done.popleft()
            last = read.popleft()
            self._base += 1
            self.moved += 1
        position = last.position
        assert position is not None and position.value is not None
        self.committed = StoredPosition.after(last.stream, position.value, position.shard)
        return True

    def restart(self, committed: StoredPosition) -> None:
        """A seek moved the reader: resume at ``committed`` (where it landed), and forget the
        deliveries read before it, whose settles no longer move anything."""
        self._base += len(self._read)
        self._read.clear()
        self._done.clear()
        self.committed = committed
        self.moved += 1

    @property
    def in_flight(self) -> int:
        return len(self._read)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
