"""The client: one object per deployment, with the small surface handlers and transports use.

:class:`RedisClient` is that surface (``execute``, ``pipeline``, ``transaction``, ``subscribe``,
``connection``, ``dedicated_connection``, ``aclose``); :class:`Redis` implements it for a
single server or a sentinel-monitored primary, :class:`~.cluster.RedisCluster` for a cluster.

Failure semantics, the same everywhere: a command whose connection fails raises
:class:`~.errors.RedisConnectionError` and is never re-sent by the client (a re-sent XADD is a
duplicate); the next command opens a new connection, paced by a capped, jittered backoff.
Every way of connecting shares that pacing per server: the pool, dedicated connections and
subscriptions, so a loop that reconnects again and again waits between attempts.
A cancelled command closes its connection, which is then dropped from the pool.
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Self

from .backoff import Backoff
from .capabilities import SNAPSHOT, ServerCommands, read_commands
from .config import ClientConfig, ConnectionOptions
from .connection import Connection, open_connection
from .errors import (
    Address,
    ReadOnlyError,
    RedisConnectionError,
    RedisError,
    RedisTimeoutError,
    format_address,
)
from .negotiation import ProtocolWatch
from .pipeline import Item, Pipeline, Transaction, fold_replies, wire_commands
from .pool import ConnectionPool
from .protocol import Arg
from .replies import Replies
from .sentinel import PrimaryPool, SentinelLocator, SwitchWatch
from .subscriber import Gap, Subscription


class RedisClient(abc.ABC):
    """What every client offers, whatever the deployment behind it."""

    config: ClientConfig
    _protocols: ProtocolWatch
    _commands: ServerCommands | None = None

    @property
    def protocol(self) -> int | None:
        """The RESP version the client's connections speak: 3, or 2 on a server without
        ``HELLO`` (logged once as a warning); None before the first connection."""
        return self._protocols.protocol

    @property
    def commands(self) -> ServerCommands:
        """The server's command table as last read (:meth:`server_commands`), or the committed
        :data:`~.capabilities.SNAPSHOT` before it was read: what a synchronous check (a
        pipeline-window segment) consults."""
        return self._commands or SNAPSHOT

    async def server_commands(self) -> ServerCommands:
        """The server's command table: which commands it has, where their keys are, and the
        options of the commands the transports ask about (see :mod:`.capabilities`).

        Read once and kept; a connection opened after the server was lost reads it again before
        it is used, so a server replaced by another build is seen as it is. Cancelling the
        first read closes its connection; the next call reads again.
        """
        if self._commands is None:
            self._commands = await self._read_commands()
        return self._commands

    @abc.abstractmethod
    async def _read_commands(self) -> ServerCommands: ...

    @abc.abstractmethod
    async def execute(self, *args: Any) -> Any:
        """Run one command on the node that serves it; return the reply.

        Error replies raise :class:`~.errors.ReplyError` (typed by code); a lost connection
        raises :class:`~.errors.RedisConnectionError` and the command is not re-sent.
        """

    def pipeline(self) -> Pipeline:
        """A pipeline: queued commands leave in one write, replies come back in order."""
        return Pipeline(self._run_pipeline)

    def transaction(self) -> Transaction:
        """A MULTI/EXEC block, sent in one write (in a cluster: all keys in one slot)."""
        return Transaction(self._run_pipeline)

    @abc.abstractmethod
    def subscribe(
        self,
        channels: Iterable[str | bytes] = (),
        *,
        patterns: Iterable[str | bytes] = (),
        shard_channels: Iterable[str | bytes] = (),
        on_lost: Callable[[RedisError], None] | None = None,
        on_resumed: Callable[[Gap], None] | None = None,
    ) -> Subscription:
        """A Pub/Sub subscription on its own connection; use as ``async with`` and iterate.

        ``on_lost(error)`` is called (synchronously) once per loss of the connection, when it
        begins; the :class:`~.subscriber.Gap` the iteration yields after the reconnect ends it.
        ``on_resumed(gap)`` is called (synchronously) when it is subscribed again, with that
        gap: at once, where the iteration yields it only after what the lost connection still
        had to deliver (see :meth:`~.subscriber.Subscription.watch`).
        """

    @abc.abstractmethod
    def connection(self, key: Arg | None = None) -> AbstractAsyncContextManager[Connection]:
        """Lease a pooled connection (to ``key``'s node in a cluster) for several commands.

        Use it for WATCH/MULTI sequences; it goes back to the pool on exit, reset first if a
        MULTI is open or keys are watched. A lease that ends by an exception or a cancellation
        closes its connection instead.
        """

    @abc.abstractmethod
    def dedicated_connection(
        self, key: Arg | None = None
    ) -> AbstractAsyncContextManager[Connection]:
        """A new connection outside the pool, closed on exit: for blocking reads
        (``XREADGROUP BLOCK``, ``BLMOVE``) that must not hold a pooled slot.

        Opening it is paced like the pool's connects (the same backoff state for the server),
        so a retry loop around it does not spin while the server is down.
        """

    @abc.abstractmethod
    async def _run_pipeline(self, items: Sequence[Item]) -> Replies: ...

    @abc.abstractmethod
    async def aclose(self) -> None:
        """Close pooled connections; the client cannot be used afterwards."""

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()


class Redis(RedisClient):
    """A client of one server, or of the primary that sentinels name for a service."""

    def __init__(self, config: ClientConfig) -> None:
        self.config = config
        self._protocols = ProtocolWatch(config.connection.protocol)
        self._locator: SentinelLocator | None = None
        if config.topology == "sentinel":
            assert config.service_name is not None
            self._locator = SentinelLocator(
                config.addresses,
                config.service_name,
                node_options=config.connection,
                sentinel_options=ConnectionOptions(
                    username=config.sentinel_username,
                    password=config.sentinel_password,
                    ssl_context=config.connection.ssl_context,
                    connect_timeout=config.connection.connect_timeout,
                    command_timeout=config.connection.command_timeout,
                ),
            )
            label = f"primary of {config.service_name!r}"
        else:
            label = f"redis {format_address(config.addresses[0])}"
        self._label = label
        self._commands_stale = False
        self._pool = (PrimaryPool if self._locator else ConnectionPool)(
            self._open_node,
            label=label,
            max_size=config.pool_size,
            timeout=config.pool_timeout,
            backoff=Backoff(config.backoff_initial, config.backoff_cap),
            on_lost=self._server_lost,
        )
        self._watch: SwitchWatch | None = None
        if self._locator is not None:
            assert isinstance(self._pool, PrimaryPool)
            self._watch = SwitchWatch(
                self._locator,
                self._pool,
                backoff=(config.backoff_initial, config.backoff_cap),
                health_check=(config.health_check_interval, config.health_check_timeout),
            )

    def __repr__(self) -> str:
        return f"<Redis {self._pool!r}>"

    @property
    def address(self) -> Address | None:
        """The server commands go to (for sentinel: the primary last verified, if any)."""
        if self._locator is not None:
            return self._locator.known_primary
        return self.config.addresses[0]

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool (for inspection: ``in_use``, ``idle_count``)."""
        return self._pool

    async def _open_node(self) -> Connection:
        if self._locator is not None:
            connection = await self._locator.open_primary()
        else:
            connection = await open_connection(self.config.addresses[0], self.config.connection)
        if self._commands_stale and self._commands is not None:
            # The server was lost: the one answering now may be another build (an upgrade, a
            # failover). Read its table before anything relies on the old one.
            try:
                self._commands = await read_commands(connection, source=self._commands.source)
            except BaseException:
                connection.close()
                raise
            self._commands_stale = False
        return self._protocols.seen(connection)

    async def _read_commands(self) -> ServerCommands:
        async with self.connection() as connection:
            commands = await read_commands(connection, source=self._label)
        self._commands_stale = False
        return commands

    def _server_lost(self) -> None:
        """A connection to the server was lost: the next one opened reads its table again."""
        self._commands_stale = True

    def _node_failed(self) -> None:
        """The node went away or stopped being primary: stop trusting pooled connections."""
        self._pool.discard_idle()
        self._server_lost()
        if self._locator is not None:
            self._locator.forget()

    async def execute(self, *args: Any) -> Any:
        pool = self._pool
        connection = await pool.acquire()
        try:
            return await connection.execute_command(args)
        except RedisTimeoutError:
            raise  # a slow reply (command_timeout): only this connection is dropped
        except (RedisConnectionError, ReadOnlyError):
            self._node_failed()
            raise
        finally:
            pool.release(connection)

    async def _run_pipeline(self, items: Sequence[Item]) -> Replies:
        if not items:
            return Replies()
        pool = self._pool
        connection = await pool.acquire()
        try:
            replies = await connection.execute_many(wire_commands(items))
        except RedisTimeoutError:
            raise  # a slow reply (command_timeout): only this connection is dropped
        except RedisConnectionError:
            self._node_failed()
            raise
        finally:
            pool.release(connection)
        if self._locator is not None and any(isinstance(r, ReadOnlyError) for r in replies):
            self._node_failed()
        return fold_replies(items, replies, connection.address)

    def subscribe(
        self,
        channels: Iterable[str | bytes] = (),
        *,
        patterns: Iterable[str | bytes] = (),
        shard_channels: Iterable[str | bytes] = (),
        on_lost: Callable[[RedisError], None] | None = None,
        on_resumed: Callable[[Gap], None] | None = None,
    ) -> Subscription:
        return Subscription(
            self._pool.open_unpooled,
            channels=channels,
            patterns=patterns,
            shard_channels=shard_channels,
            backoff=Backoff(self.config.backoff_initial, self.config.backoff_cap),
            on_connection_lost=self._node_failed,
            on_lost=on_lost,
            on_resumed=on_resumed,
            health_check_interval=self.config.health_check_interval,
            health_check_timeout=self.config.health_check_timeout,
        )

    @asynccontextmanager
    async def connection(self, key: Arg | None = None) -> AsyncIterator[Connection]:
        async with self._pool.connection() as connection:
            try:
                yield connection
            except RedisTimeoutError:
                raise  # a slow reply (command_timeout): only this connection is dropped
            except (RedisConnectionError, ReadOnlyError):
                self._node_failed()
                raise

    @asynccontextmanager
    async def dedicated_connection(self, key: Arg | None = None) -> AsyncIterator[Connection]:
        connection = await self._pool.open_unpooled()
        try:
            yield connection
        except RedisTimeoutError:
            raise  # a slow reply (command_timeout): only this connection is dropped
        except (RedisConnectionError, ReadOnlyError):
            self._node_failed()
            raise
        finally:
            connection.close()

    async def __aenter__(self) -> Self:
        if self._watch is not None:  # follow failovers as the sentinels announce them
            await self._watch.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.aclose()
        finally:
            if self._watch is not None:
                await self._watch.stop()

    async def aclose(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
        await self._pool.aclose()
