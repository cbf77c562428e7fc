"""What a broker needs of its server's command table when it connects.

A broker reads the table once at connect (:meth:`~.client.RedisClient.server_commands`): the
settles choose ``XACKDEL`` from it, the pipeline-window check learns command keys from it. A
subscription that asks for what the server does not have is refused here, before anything is
read, with a message that names the server and what it lacks: never done another way.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from ..core.errors import UnsupportedError
from .client import RedisClient
from .client.capabilities import SNAPSHOT, ServerCommands
from .client.errors import ConnectionSetupError, ReplyError
from .streams import DeletePolicy, RedisStream

__all__ = ["read_offers"]

_log = logging.getLogger("trio_streams.redis")


async def read_offers(
    client: RedisClient, subscriptions: Iterable[tuple[str, object]]
) -> ServerCommands:
    """The server's table, read now, with every subscription (name and source) checked
    against it.

    A server that refuses ``COMMAND`` (an ACL) leaves :data:`~.capabilities.SNAPSHOT` in
    force, logged once: nothing newer than Redis 7.0 is used, and a subscription that needs
    more is refused. A connection the server refuses to set up (a wrong password, a database
    out of range: :class:`~.client.errors.ConnectionSetupError`) is raised as it is. Raises
    :class:`~trio_streams.core.errors.UnsupportedError` naming the subscription, the server and
    what it lacks.
    """
    try:
        commands = await client.server_commands()
    except ConnectionSetupError:
        raise  # a login or database refused is the connection's error, not COMMAND's
    except ReplyError as exc:
        _log.warning(
            "the server refused COMMAND (%s): its command table is unknown, so only what "
            "every server offers is used",
            exc,
        )
        commands = SNAPSHOT
    for name, source in subscriptions:
        check_offers(name, source, commands)
    return commands


def check_offers(name: str, source: object, commands: ServerCommands) -> None:
    """Refuse subscription ``name`` if ``source`` asks for what ``commands`` lacks."""
    if not isinstance(source, RedisStream):
        return
    policy = source.delete_policy
    if policy is None or policy is DeletePolicy.KEEPREF:
        return  # XACK and XDEL do it where XACKDEL is missing
    if commands.is_snapshot or not commands.has("xackdel"):
        lacks = (
            "its command table could not be read"
            if commands.is_snapshot
            else f"{commands.source} has no XACKDEL"
        )
        raise UnsupportedError(
            f"subscription {name!r}: delete_policy={policy.value!r} needs XACKDEL (Redis 8.2, "
            f"Valkey 9.2), and {lacks}: XACK and XDEL cannot remove other groups' references "
            "(delref) or wait for every group's acknowledgement (acked); use "
            "delete_policy='keepref' (what XDEL does), or a server with XACKDEL"
        )
