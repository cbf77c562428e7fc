"""A bounded pool of connections to one node.

At most ``max_size`` connections exist at once; a caller beyond that waits (a cancellable Trio
wait, first come first served) and gets :class:`~.errors.PoolTimeoutError` after ``timeout``.
A connection goes back to the pool only if it is idle, in sync and carries no session state;
one that broke, or that is readable while idle (the server closed it or sent something unasked),
is discarded on release or on the next checkout. A lease (:meth:`ConnectionPool.connection`)
that ends with a transaction open or keys watched is reset (``DISCARD``, ``UNWATCH``) before
the connection goes back; one that ends by an exception or a cancellation is closed.

Opening connections is paced by a capped, jittered backoff: after a failed attempt (the server
is down, refused the handshake, or refused the configuration) the next one waits, so callers
retrying in a loop do not spin. Connections opened outside the pool (:meth:`open_unpooled`, for
dedicated connections and subscriptions) share the same pacing. Nothing here re-sends a
command; a lost connection is reported to the caller.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import trio

from .backoff import Backoff
from .connection import Connection
from .errors import PoolTimeoutError, RedisConnectionError, RedisError


class ConnectionPool:
    """Connections to one node, opened on demand by ``opener``.

    ``on_lost`` is called when an idle connection is found closed or out of step at checkout
    (the server went away, or restarted), before a new one is opened in its place.
    """

    def __init__(
        self,
        opener: Callable[[], Awaitable[Connection]],
        *,
        label: str,
        max_size: int,
        timeout: float,
        backoff: Backoff,
        on_lost: Callable[[], None] | None = None,
    ) -> None:
        self._opener = opener
        self._on_lost = on_lost
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
        """Check a connection out: an idle healthy one, or a new one while under the bound.

        A caller already cancelled gets ``trio.Cancelled`` here, before anything is checked
        out, so a command in a cancelled scope is never sent, idle connections or not.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
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
                if self._on_lost is not None:
                    self._on_lost()  # the server closed it: it may have restarted
            return await self._open()
        except BaseException:
            self._slots.release()
            raise

    async def open_unpooled(self) -> Connection:
        """A new connection that the pool does not own (the caller closes it), paced by the
        pool's backoff: a loop that opens dedicated connections against a dead server waits
        between attempts exactly as the pool's own connects do."""
        return await self._open()

    async def _open(self) -> Connection:
        wait = self._retry_at - trio.current_time()
        if wait > 0:
            await trio.sleep(wait)
        try:
            connection = await self._opener()
        except RedisError:
            # Any failure paces the next attempt: a dead server, a retryable refusal
            # (HandshakeError), and a configuration refusal too (raised at once, but a loop
            # that retries it anyway must not spin).
            self._retry_at = trio.current_time() + self._backoff.failed()
            raise
        self._backoff.succeeded()
        self._retry_at = 0.0
        return connection

    def release(self, connection: Connection) -> None:
        """Give a connection back; a broken, out-of-sync or stateful one is closed instead.

        The cheap checks run here; the socket readability check waits until the connection is
        checked out again, when it matters (and costs one syscall, not two).
        """
        if self._closed or not connection.is_in_sync() or connection.has_session_state:
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
        """Lease one connection for several commands; it returns to the pool on exit.

        A lease left with a ``MULTI`` open or keys ``WATCH``ed is reset first (one round trip).
        A lease that ends by an exception or a cancellation closes its connection: whatever
        was half done on it is not handed to the next caller.
        """
        connection = await self.acquire()
        try:
            yield connection
            if connection.has_session_state and connection.is_in_sync():
                try:
                    await connection.reset_session()
                except RedisError:
                    connection.close()  # nothing of the caller's is lost: it was a reset
        except BaseException:
            connection.close()
            raise
        finally:
            self.release(connection)

    async def aclose(self) -> None:
        """Close idle connections now; leased ones are closed when released."""
        self._closed = True
        self.discard_idle()
        await trio.lowlevel.checkpoint()
