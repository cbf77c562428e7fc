"""Which RESP version a client's connections speak, and one warning when RESP3 was refused.

A connection asks for RESP3 (``HELLO 3``) and falls back to RESP2 on a server without
``HELLO``. Replies then come in other shapes (see :mod:`.shapes`), so the fallback is not
silent: the first connection that falls back logs a warning, once per client, and the client's
``protocol`` says what is spoken.
"""

from __future__ import annotations

import logging

from .connection import Connection
from .errors import format_address

logger = logging.getLogger("trio_streams.redis.client")


class ProtocolWatch:
    """Records the protocol of each new connection of one client; warns at the first fallback."""

    __slots__ = ("_requested", "_warned", "protocol")

    def __init__(self, requested: int) -> None:
        self._requested = requested
        self._warned = False
        #: The RESP version of the newest connection, None before the first one.
        self.protocol: int | None = None

    def seen(self, connection: Connection) -> Connection:
        """Note ``connection``'s protocol; returns it, so an opener can end with this call."""
        self.protocol = connection.protocol
        if connection.protocol < self._requested and not self._warned:
            self._warned = True
            logger.warning(
                "redis %s does not speak RESP3 (no HELLO): using RESP2; replies keep RESP2 "
                "shapes (trio_streams.redis.client.shapes gives one shape for both)",
                format_address(connection.address),
            )
        return connection
