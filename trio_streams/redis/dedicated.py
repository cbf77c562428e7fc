"""The one dedicated connection a Redis reader keeps for its blocking reads.

A blocking ``XREAD``/``XREADGROUP`` must not hold a pooled connection hostage, so each reader
leases one dedicated connection and keeps it between reads; a broken one is dropped and a new
one leased (through the client's pacing). Dropping is shielded: the lease ends cleanly even
when the reader is being cancelled, and when it ends because of an error the client sees that
error (so it forgets a primary that went away).
"""

from __future__ import annotations

from contextlib import AsyncExitStack

import trio

from .client.client import RedisClient
from .client.connection import Connection

__all__ = ["DedicatedConnection"]


class DedicatedConnection:
    """A reader's dedicated connection to the node that serves ``key``."""

    __slots__ = ("_client", "_conn", "_key", "_stack")

    def __init__(self, client: RedisClient, key: str) -> None:
        self._client = client
        self._key = key
        self._stack: AsyncExitStack | None = None
        self._conn: Connection | None = None

    async def get(self) -> tuple[Connection, bool]:
        """The connection, and whether it is new (a reader that resumes from its own pending
        entries after a reconnect needs to know)."""
        conn = self._conn
        if conn is not None and not conn.broken:
            return conn, False
        await self.drop(None)
        stack = AsyncExitStack()
        conn = await stack.enter_async_context(self._client.dedicated_connection(self._key))
        self._stack, self._conn = stack, conn
        return conn, True

    async def drop(self, error: BaseException | None) -> None:
        """End the lease (shielded); ``error`` is why, if it ended by one."""
        stack, self._stack, self._conn = self._stack, None, None
        if stack is None:
            return
        with trio.CancelScope(shield=True):
            if error is None:
                await stack.aclose()
            else:  # let the client see why (a lost primary is forgotten)
                await stack.__aexit__(type(error), error, error.__traceback__)
