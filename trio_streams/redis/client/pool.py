"""A bounded pool of connections to one node.

At most ``max_size`` connections exist at once; a caller beyond that waits (a cancellable Trio
wait, first come first served) and gets :class:`~.errors.PoolTimeoutError` after ``timeout``.
A connection goes back to the pool only if it is idle and in sync; one that broke, or that is
readable while idle (the server closed it or sent something unasked), is discarded on release
or on the next checkout.

Opening connections is paced by a capped, jittered backoff: after a failed connect the next
attempt waits, so callers retrying against a dead server do not spin. Nothing here re-sends a
command; a lost connection is reported to the caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from .backoff import Backoff
from .connection import Connection
from .errors import PoolTimeoutError, RedisConnectionError


class ConnectionPool:
    """Connections to one node, opened on demand by ``opener``."""

    def __init__(
        self,
        opener: Callable[[], Awaitable[Connection]],
        *,
        label: str,
        max_size: int,
        timeout: float,
        backoff: Backoff,
    ) -> None:
        self._opener = opener
        self._label = label
        self._idle: list[Connection] = []
        self._slots = trio.Semaphore(max_size)
        self._backoff = backoff
        self._retry_at = 0.0
        self._closed = False
        self.max_size = max_size
        self.timeout = timeout

    def __repr__(self) -> str:
        return f"<ConnectionPool {self._label} idle={len(self._idle)} max={self.max_size}>"

    @property
    def in_use(self) -> int:
        """Connections currently checked out."""
        return self.max_size - self._slots.value

    @property
    def idle_count(self) -> int:
        """Connections waiting in the pool."""
        return len(self._idle)

    async def acquire(self) -> Connection:
        """Check a connection out: an idle healthy one, or a new one while under the bound."""
        if self._closed:
            raise RedisConnectionError("the client is closed", address=None)
        try:
            self._slots.acquire_nowait()
        except trio.WouldBlock:
            with trio.move_on_after(self.timeout) as waited:
                await self._slots.acquire()
            if waited.cancelled_caught:
                raise PoolTimeoutError(
                    f"no connection to {self._label} became free within {self.timeout}s: "
                    f"all {self.max_size} are in use (raise pool_size or release them sooner)"
                ) from None
        return await self._take()

    async def _take(self) -> Connection:
        """With a slot held: return an idle healthy connection or open one."""
        try:
            while self._idle:
                connection = self._idle.pop()
                if connection.is_reusable():
                    return connection
                connection.close()
            return await self._open()
        except BaseException:
            self._slots.release()
            raise

    async def _open(self) -> Connection:
        wait = self._retry_at - trio.current_time()
        if wait > 0:
            await trio.sleep(wait)
        try:
            connection = await self._opener()
        except RedisConnectionError:
            self._retry_at = trio.current_time() + self._backoff.failed()
            raise
        self._backoff.succeeded()
        self._retry_at = 0.0
        return connection

    def release(self, connection: Connection) -> None:
        """Give a connection back; a broken or out-of-sync one is closed instead of kept.

        The cheap in-sync check runs here; the socket readability check waits until the
        connection is checked out again, when it matters (and costs one syscall, not two).
        """
        if self._closed or not connection.is_in_sync():
            connection.close()
        else:
            self._idle.append(connection)
        self._slots.release()

    def discard_idle(self) -> None:
        """Close every idle connection (after a failover or a node loss they are stale)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            connection.close()

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Connection]:
        """Lease one connection for several commands; it returns to the pool on exit."""
        connection = await self.acquire()
        try:
            yield connection
        finally:
            self.release(connection)

    async def aclose(self) -> None:
        """Close idle connections now; leased ones are closed when released."""
        self._closed = True
        self.discard_idle()
        await trio.lowlevel.checkpoint()
