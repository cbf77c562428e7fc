"""The exclusive ``flock`` that serializes appends to a stream file, held only for each append.

Every writer of a file, in this process or another, takes the lock around each append (see
:mod:`.writer`); ``trio-streams file write`` and ``file repair`` hold it for the whole of their
work. The lock belongs to an open file description, so a writer first tries it on its own
descriptor without blocking (the common case: one ``flock`` call). When another writer holds it:

- :meth:`FileLock.acquire` blocks the calling thread until the holder releases it;
- :meth:`FileLock.acquire_async` waits in a worker thread, on a *new* description of the same
  file, so other tasks of the process that use the same writer meanwhile cannot take it through
  the shared descriptor by mistake. The wait is cancellable: a cancelled wait is abandoned and the
  thread, if it gets the lock afterwards, drops it at once (nobody is left holding it).

:func:`hold_exclusively` is the waiting, with a time limit, of the tools that need the file to
themselves; past the limit they fail with :class:`~trio_streams.file.errors.WriterLockedError`.
"""

from __future__ import annotations

import fcntl
import os
import threading

from .errors import WriterLockedError

__all__ = ["EXCLUSIVE_WAIT", "FileLock", "hold_exclusively"]

#: Seconds a tool that needs the file to itself waits for the writers' appends to let it in.
EXCLUSIVE_WAIT = 10.0


def _reopen(fd: int, path: str) -> int:
    """A new open file description of the file behind ``fd`` (the same file, even if renamed,
    where ``/proc`` is mounted; else the file at ``path``)."""
    try:
        return os.open(f"/proc/self/fd/{fd}", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return os.open(path, os.O_RDONLY | os.O_CLOEXEC)


class _Wait:
    """A lock wait in a worker thread, and who owns its descriptor once it got the lock."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._state = threading.Lock()
        self._abandoned = False
        self._delivered = False

    def run(self) -> bool:
        """Block until the lock is held on :attr:`fd`; False if the waiter left meanwhile (the
        lock and the descriptor are then dropped here)."""
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except BaseException:
            with self._state:
                self._abandoned = True  # never delivered: the descriptor is still ours
            os.close(self.fd)
            raise
        with self._state:
            if not self._abandoned:
                self._delivered = True
                return True
        os.close(self.fd)
        return False

    def abandon(self) -> None:
        """The waiter leaves: the descriptor is closed now if the lock came, else by :meth:`run`."""
        with self._state:
            self._abandoned = True
            delivered = self._delivered
        if delivered:
            os.close(self.fd)


class FileLock:
    """The append lock of the file open as ``fd``; at most one holder at a time in a process.

    Not thread-safe: one thread (the Trio thread, or a script's) uses it; only the waits of
    :meth:`acquire_async` happen in worker threads.
    """

    def __init__(self, fd: int, path: str) -> None:
        self.fd = fd
        self.path = path
        #: The descriptor the lock is held on (``fd`` or one opened for an async wait); None.
        self._held: int | None = None
        #: Async waits in flight: a blocking acquire meanwhile, on this thread, would deadlock.
        self.waiting = 0

    @property
    def held(self) -> bool:
        return self._held is not None

    def try_acquire(self) -> bool:
        """Take the lock if it is free (one system call); False if another writer holds it."""
        assert self._held is None, "lock taken twice"
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        self._held = self.fd
        return True

    def acquire(self) -> None:
        """Take the lock, blocking this thread while another writer holds it."""
        if self.waiting:
            raise RuntimeError(
                f"{self.path}: a blocking flush while an async one of the same writer waits for "
                "the lock would never return; use the writer's async methods in async code"
            )
        if not self.try_acquire():
            fcntl.flock(self.fd, fcntl.LOCK_EX)
            self._held = self.fd

    async def acquire_async(self) -> None:
        """Take the lock, waiting in a worker thread while another writer holds it.

        Cancellable: a cancelled call holds nothing (the abandoned thread lets go of the lock
        as soon as it gets it).
        """
        import trio  # here: the tools that only read EXCLUSIVE_WAIT start without Trio

        await trio.lowlevel.checkpoint_if_cancelled()
        if self.try_acquire():
            return
        wait = _Wait(_reopen(self.fd, self.path))
        self.waiting += 1
        try:
            got = await trio.to_thread.run_sync(wait.run, abandon_on_cancel=True)
        except BaseException:
            wait.abandon()
            raise
        finally:
            self.waiting -= 1
        # Other tasks hold the lock only inside a synchronous append: none can hold it now.
        assert got and self._held is None
        self._held = wait.fd

    def release(self) -> None:
        """Let the next writer in."""
        held, self._held = self._held, None
        if held is None:
            return
        if held == self.fd:
            fcntl.flock(held, fcntl.LOCK_UN)
        else:
            os.close(held)


def hold_exclusively(fd: int, path: str, *, timeout: float = EXCLUSIVE_WAIT) -> int:
    """Take the file's lock for a tool that needs the file to itself; returns a new descriptor of
    the file it is held on: close it to let writers in again.

    Waits at most ``timeout`` seconds for the writers' appends, then raises
    :class:`WriterLockedError`.
    """
    lock_fd = _reopen(fd, path)
    try:
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock_fd)
    else:
        return lock_fd
    wait = _Wait(_reopen(fd, path))
    result: list[bool] = []
    thread = threading.Thread(
        target=lambda: result.append(wait.run()), name="trio-streams lock wait", daemon=True
    )
    thread.start()
    thread.join(timeout)
    if not result:
        wait.abandon()
        raise WriterLockedError(
            f"another writer held the file's lock for {timeout:g} s",
            path=path,
        )
    return wait.fd
