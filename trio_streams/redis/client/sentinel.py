"""Finding the primary of a sentinel-monitored service, and checking that it still is one.

The sentinels are asked in turn (the first that answers moves to the front); the node they
name is asked ``ROLE`` before the client uses it, because right after a failover a sentinel
can still name the old primary. The client forgets the address when a connection to it fails
or a write meets ``READONLY``, so the next connection asks the sentinels again: this is how a
failover is followed. Commands that were in flight are not re-sent.
"""

from __future__ import annotations

from .config import ConnectionOptions
from .connection import Connection, open_connection
from .errors import Address, RedisConnectionError, ReplyError, SentinelError, format_address


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
        self._sentinel_options = sentinel_options
        self._primary: Address | None = None

    @property
    def known_primary(self) -> Address | None:
        """The primary in use, or None until asked (or after :meth:`forget`)."""
        return self._primary

    def forget(self) -> None:
        """Drop the cached primary: the next connection asks the sentinels again."""
        self._primary = None

    async def discover(self) -> Address:
        """Ask each sentinel in turn for the primary's address."""
        failures: list[str] = []
        for index, sentinel in enumerate(list(self._sentinels)):
            try:
                connection = await open_connection(sentinel, self._sentinel_options)
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
        """A connection to the primary, verified with ``ROLE``."""
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
