"""Finding the primary of a sentinel-monitored service, and following it when it changes.

The sentinels are asked in turn (the first that answers moves to the front); the node they
name is asked ``ROLE`` before the client uses it, because right after a failover a sentinel
can still name the old primary. The client forgets the address when a connection to it fails
or a write meets ``READONLY``, so the next connection asks the sentinels again.

A primary demoted while alive (a manual ``SENTINEL FAILOVER``) fails no connection and meets
no ``READONLY`` until the sentinels reconfigure it, seconds later; every write it acknowledges
meanwhile is lost. So, while the client is used as ``async with``, a :class:`SwitchWatch`
listens on every sentinel for the ``+switch-master`` announcement and moves the client at once:
the announced node becomes the primary, idle pooled connections are closed, and connections
in use are closed when they come back (:class:`PrimaryPool`). Commands that were in flight are
not re-sent.
"""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager

import trio

from .backoff import Backoff
from .config import ConnectionOptions
from .connection import Connection, open_connection
from .errors import (
    Address,
    RedisConnectionError,
    RedisError,
    ReplyError,
    SentinelError,
    format_address,
)
from .pool import ConnectionPool
from .subscriber import Gap, Subscription

logger = logging.getLogger("trio_streams.redis.client")

#: The channel on which sentinels announce a new primary: ``name old-ip old-port new-ip new-port``.
SWITCH_CHANNEL = "+switch-master"


class SentinelLocator:
    """Asks sentinels for the current primary of ``service``."""

    def __init__(
        self,
        sentinels: tuple[Address, ...],
        service: str,
        *,
        node_options: ConnectionOptions,
        sentinel_options: ConnectionOptions,
    ) -> None:
        self._sentinels = list(sentinels)
        self.service = service
        self._node_options = node_options
        self.sentinel_options = sentinel_options
        self._primary: Address | None = None
        #: Counts changes of the primary learnt elsewhere (announced, or forgotten), so a
        #: connection opened to the address known before is not taken for the current one.
        self._changes = 0

    @property
    def sentinels(self) -> tuple[Address, ...]:
        """The sentinels, the one that answered last first."""
        return tuple(self._sentinels)

    @property
    def known_primary(self) -> Address | None:
        """The primary in use, or None until asked (or after :meth:`forget`)."""
        return self._primary

    def forget(self) -> None:
        """Drop the cached primary: the next connection asks the sentinels again."""
        self._primary = None
        self._changes += 1

    def follow(self, address: Address) -> None:
        """The sentinels announced ``address`` as the primary: use it from now on."""
        self._primary = address
        self._changes += 1

    async def discover(self) -> Address:
        """Ask each sentinel in turn for the primary's address."""
        failures: list[str] = []
        for index, sentinel in enumerate(list(self._sentinels)):
            try:
                connection = await open_connection(sentinel, self.sentinel_options)
            except RedisConnectionError as exc:
                failures.append(f"{format_address(sentinel)}: {exc.reason}")
                continue
            try:
                reply = await connection.execute(
                    "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
                )
            except (RedisConnectionError, ReplyError) as exc:
                failures.append(f"{format_address(sentinel)}: {exc}")
                continue
            finally:
                connection.close()
            if not reply:
                failures.append(f"{format_address(sentinel)}: does not know {self.service!r}")
                continue
            if index:  # remember which sentinel answers
                self._sentinels.insert(0, self._sentinels.pop(index))
            host, port = reply[0], reply[1]
            return (host.decode() if isinstance(host, bytes) else str(host), int(port))
        raise SentinelError(
            f"no sentinel named a primary for service {self.service!r} ({'; '.join(failures)})"
        )

    async def open_primary(self) -> Connection:
        """A connection to the primary, verified with ``ROLE``.

        If the primary changed while it was being opened (announced by the sentinels), the
        connection is to the old one: it is closed and the new one is opened instead.
        """
        for _ in range(3):
            changes = self._changes
            connection = await self._open_primary()
            if self._changes == changes or connection.address == self._primary:
                return connection
            connection.close()
        raise SentinelError(
            f"the primary of {self.service!r} kept changing while a connection was opened"
        )

    async def _open_primary(self) -> Connection:
        address = self._primary or await self.discover()
        try:
            connection = await open_connection(address, self._node_options)
        except BaseException:
            self._primary = None  # dead or unreachable: ask the sentinels next time
            raise
        try:
            role = await connection.execute("ROLE")
        except BaseException:
            connection.close()
            self._primary = None
            raise
        kind = role[0].decode() if isinstance(role[0], bytes) else str(role[0])
        if kind != "master":
            connection.close()
            self._primary = None
            raise SentinelError(
                f"sentinels named {format_address(address)} as primary of {self.service!r} "
                f"but it reports role {kind!r} (a failover is in progress)",
                address=address,
            )
        self._primary = address
        return connection


class PrimaryPool(ConnectionPool):
    """The pool of a sentinel client: a connection to a node other than the primary the
    locator knows is closed when it is given back, never handed out again."""

    locator: SentinelLocator | None = None

    def release(self, connection: Connection) -> None:
        locator = self.locator
        if locator is not None:
            primary = locator.known_primary
            if primary is not None and connection.address != primary:
                connection.close()
        super().release(connection)


class SwitchWatch:
    """Listens on every sentinel for ``+switch-master`` of the service, in a task of its own.

    An announcement makes the announced node the primary at once (see the module docstring).
    When a sentinel's subscription starts, or comes back after a gap (announcements may have
    been missed), the sentinels are asked for the primary, and a changed answer is followed
    the same way. A sentinel that cannot be reached is retried with backoff; the watch never
    fails the client. :meth:`start` runs it in a nursery of its own, :meth:`stop` cancels it
    and waits for its tasks.
    """

    def __init__(
        self,
        locator: SentinelLocator,
        pool: PrimaryPool,
        *,
        backoff: tuple[float, float],
        health_check: tuple[float, float],
    ) -> None:
        self._locator = locator
        self._pool = pool
        pool.locator = locator
        self._backoff = backoff
        self._health_check = health_check
        self._manager: AbstractAsyncContextManager[trio.Nursery] | None = None
        self._scope = trio.CancelScope()

    async def start(self) -> None:
        """Start listening; the tasks live in a nursery this object owns until :meth:`stop`.

        The nursery's own scope is never cancelled here: it encloses the caller's code
        between :meth:`start` and :meth:`stop`. The tasks run in a scope of their own.
        """
        if self._manager is not None:
            return
        self._scope = trio.CancelScope()
        manager = trio.open_nursery()
        nursery = await manager.__aenter__()
        self._manager = manager
        nursery.start_soon(self._run, self._scope)

    def cancel(self) -> None:
        """Stop listening (the tasks end at their next checkpoint)."""
        self._scope.cancel()

    async def stop(self) -> None:
        """Cancel the listening tasks and wait for them (call it where :meth:`start` was)."""
        manager, self._manager = self._manager, None
        if manager is None:
            return
        self.cancel()
        await manager.__aexit__(None, None, None)

    async def _run(self, scope: trio.CancelScope) -> None:
        with scope:
            async with trio.open_nursery() as nursery:
                for sentinel in self._locator.sentinels:
                    nursery.start_soon(self._listen, sentinel)

    async def _listen(self, sentinel: Address) -> None:
        options = self._locator.sentinel_options

        async def opener() -> Connection:
            return await open_connection(sentinel, options)

        failures = Backoff(*self._backoff)
        interval, timeout = self._health_check
        while True:
            subscription = Subscription(
                opener,
                channels=[SWITCH_CHANNEL],
                backoff=Backoff(*self._backoff),
                health_check_interval=interval,
                health_check_timeout=timeout,
            )
            try:
                async with subscription:
                    failures.succeeded()
                    await self._verify()  # announced before this subscription started?
                    async for item in subscription:
                        if isinstance(item, Gap):
                            await self._verify()
                        else:
                            self._announced(item.data)
            except RedisError as exc:
                logger.debug("sentinel %s: %s", format_address(sentinel), exc)
            await trio.sleep(failures.failed())

    async def _verify(self) -> None:
        if self._locator.known_primary is None:
            return  # nothing in use to compare with: the next connection asks anyway
        try:
            address = await self._locator.discover()
        except RedisConnectionError:
            return
        self._switch(address)

    def _announced(self, data: bytes) -> None:
        parts = data.decode("utf-8", "replace").split(" ")
        if len(parts) != 5 or parts[0] != self._locator.service:
            return
        try:
            address = (parts[3], int(parts[4]))
        except ValueError:
            return
        self._switch(address)

    def _switch(self, address: Address) -> None:
        if address == self._locator.known_primary:
            return  # already there (every sentinel announces the same switch)
        previous = self._locator.known_primary
        self._locator.follow(address)
        self._pool.discard_idle()
        logger.info(
            "primary of %r moved from %s to %s (sentinel announcement)",
            self._locator.service,
            format_address(previous),
            format_address(address),
        )
