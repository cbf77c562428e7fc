"""One change watch per file per process, shared by every follower (and writer) of that file.

On Linux the watch is an inotify descriptor read on Trio's own event loop
(``trio.lowlevel.wait_readable``), so a write to the file wakes its followers at once. Elsewhere,
or when inotify cannot be had, there is no OS watch and followers rely on their polling timeout
(1 ms doubling to 1024 ms), which is also the safety net when the OS reports late.

Several tasks may wait on one watch. The first to wait reads the descriptor (the "leader") and
announces each batch of events by bumping :attr:`FileWatch.generation` and setting an event;
the others wait for that event. If the leader is cancelled, it wakes the rest so one of them
takes over, so no wait is ever left without a reader of the descriptor. There is no background
task: nothing runs that a follower's nursery does not own.

inotify is three libc calls, reached with ``ctypes`` rather than a dependency.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os
import sys
from dataclasses import dataclass, field

import trio

_IN_MODIFY = 0x002
_IN_ATTRIB = 0x004
_IN_CLOSE_WRITE = 0x008
_IN_DELETE_SELF = 0x400
_IN_MOVE_SELF = 0x800
_IN_NONBLOCK = 0o4000
_IN_CLOEXEC = 0o2000000
#: Data written, metadata changed (an unlink drops the link count), file deleted or moved.
_WATCH_MASK = _IN_MODIFY | _IN_ATTRIB | _IN_CLOSE_WRITE | _IN_DELETE_SELF | _IN_MOVE_SELF
#: One read of the descriptor; an event of a watched file (no name) takes 16 bytes, one of a
#: directory at most 16 + NAME_MAX + 1, so a read shorter than the buffer by that much took all.
_READ_BYTES = 65536
_EVENT_MAX = 16 + 256


def _inotify_fd(path: str) -> int:
    """An inotify descriptor watching ``path``, or -1 where inotify is unavailable."""
    if not sys.platform.startswith("linux"):
        return -1
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fd = libc.inotify_init1(_IN_NONBLOCK | _IN_CLOEXEC)
    except (OSError, AttributeError):
        return -1
    if fd < 0:
        return -1
    if libc.inotify_add_watch(fd, os.fsencode(path), _WATCH_MASK) < 0:
        os.close(fd)
        return -1
    return int(fd)


class FileWatch:
    """Change notifications for one file path; obtain it from a :class:`WatchRegistry`."""

    def __init__(self, path: str, *, inotify: bool = True) -> None:
        self.path = path
        #: Bumped once per batch of OS events; a waiter compares it with what it saw before.
        self.generation = 0
        self._fd = _inotify_fd(path) if inotify else -1
        self._event = trio.Event()
        self._leading = False
        self._refs = 0

    @property
    def uses_os_events(self) -> bool:
        """False when only the followers' polling timeout notices changes."""
        return self._fd >= 0

    async def wait_change(self, seen: int) -> None:
        """Return once :attr:`generation` differs from ``seen``. The caller bounds the wait.

        Without an OS watch this only returns when cancelled (by the caller's timeout).
        """
        while self.generation == seen:
            if self._fd < 0:
                await trio.sleep_forever()
            if self._leading:
                await self._event.wait()
                continue
            self._leading = True
            try:
                await trio.lowlevel.wait_readable(self._fd)
                self._drain()
                self.generation += 1
            finally:
                self._leading = False
                event, self._event = self._event, trio.Event()
                event.set()

    def _drain(self) -> None:
        """Read the events queued now: one ``read`` unless it fills the buffer.

        A read that comes back short took every event queued at that moment; events queued
        after it leave the descriptor readable, so the next wait returns at once and counts
        them as a batch of their own. A second read to prove the queue empty would cost every
        wake-up a system call on the way from the write to the follower's read."""
        while True:
            try:
                if len(os.read(self._fd, _READ_BYTES)) < _READ_BYTES - _EVENT_MAX:
                    return
            except BlockingIOError:
                return
            except OSError as exc:  # pragma: no cover - descriptor trouble ends the OS watch
                if exc.errno == errno.EINTR:
                    continue
                self._close_fd()
                return

    def _close_fd(self) -> None:
        if self._fd >= 0:
            fd, self._fd = self._fd, -1
            trio.lowlevel.notify_closing(fd)
            os.close(fd)


@dataclass
class WatchRegistry:
    """Hands out one :class:`FileWatch` per resolved path, counting its users."""

    inotify: bool = True
    _watches: dict[str, FileWatch] = field(default_factory=dict)

    def acquire(self, path: str | os.PathLike[str]) -> FileWatch:
        key = os.path.realpath(path)
        watch = self._watches.get(key)
        if watch is None:
            watch = FileWatch(key, inotify=self.inotify)
            self._watches[key] = watch
        watch._refs += 1
        return watch

    def release(self, watch: FileWatch) -> None:
        watch._refs -= 1
        if watch._refs <= 0 and self._watches.get(watch.path) is watch:
            del self._watches[watch.path]
            watch._close_fd()

    def __len__(self) -> int:
        return len(self._watches)


#: The process-wide registry used unless another is passed in.
watches = WatchRegistry()
