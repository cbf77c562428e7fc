"""A Trio-native Redis client: standalone, TLS, ACL users, pipelines, Pub/Sub, cluster, sentinel.

The surface is small on purpose::

    from trio_streams.redis.client import connect

    async with connect("redis://localhost:6379/0") as redis:
        await redis.execute("SET", "greeting", "hello")
        replies = await redis.pipeline().add("INCR", "n").add("GET", "n").execute()
        async with redis.subscribe(["news"]) as sub:
            async for item in sub:
                ...

``connect`` returns a :class:`RedisClient` whatever the URL names: one server, a cluster
(``redis+cluster://``) or a sentinel-monitored primary (``redis+sentinel://``).
"""

from __future__ import annotations

from typing import Any

from ...core.extras import require
from . import shapes
from .backoff import Backoff
from .client import Redis, RedisClient
from .cluster import RedisCluster
from .config import ClientConfig, ConnectionOptions, make_ssl_context, parse_url, redact_url
from .connection import Connection, open_connection
from .errors import (
    AskError,
    AuthenticationError,
    ClusterDownError,
    ClusterError,
    CommandEncodingError,
    CommandNotAllowedError,
    ConnectionSetupError,
    CrossSlotError,
    ExecAbortError,
    HandshakeError,
    MovedError,
    NoPermissionError,
    PoolTimeoutError,
    ReadOnlyError,
    RedisConnectionError,
    RedisError,
    RedisProtocolError,
    RedisTimeoutError,
    ReplyError,
    SentinelError,
    TryAgainError,
    WatchError,
)
from .keys import key_slot
from .pipeline import Pipeline, Transaction
from .protocol import REDIS_CLIENT
from .replies import Replies
from .shapes import StreamEntry
from .subscriber import Gap, Message, Subscription


def connect(url: str = "redis://127.0.0.1:6379", **overrides: Any) -> RedisClient:
    """A client for the deployment ``url`` names; keyword options override the URL's.

    Nothing is opened until the first command; use the client as ``async with`` or call
    ``aclose()``. See :func:`~.config.parse_url` for the URL forms and options.
    """
    return from_config(parse_url(url, **overrides))


def from_config(config: ClientConfig) -> RedisClient:
    """A client for an already built :class:`ClientConfig`.

    Without hiredis (the ``redis`` extra) it raises :class:`~trio_streams.core.extras.MissingExtra`
    here, before anything connects."""
    require("redis", REDIS_CLIENT)
    if config.topology == "cluster":
        return RedisCluster(config)
    return Redis(config)


__all__ = [
    "AskError",
    "AuthenticationError",
    "Backoff",
    "ClientConfig",
    "ClusterDownError",
    "ClusterError",
    "CommandEncodingError",
    "CommandNotAllowedError",
    "Connection",
    "ConnectionOptions",
    "ConnectionSetupError",
    "CrossSlotError",
    "ExecAbortError",
    "Gap",
    "HandshakeError",
    "Message",
    "MovedError",
    "NoPermissionError",
    "Pipeline",
    "PoolTimeoutError",
    "ReadOnlyError",
    "Redis",
    "RedisClient",
    "RedisCluster",
    "RedisConnectionError",
    "RedisError",
    "RedisProtocolError",
    "RedisTimeoutError",
    "Replies",
    "ReplyError",
    "SentinelError",
    "StreamEntry",
    "Subscription",
    "Transaction",
    "TryAgainError",
    "WatchError",
    "connect",
    "from_config",
    "key_slot",
    "make_ssl_context",
    "open_connection",
    "parse_url",
    "redact_url",
    "shapes",
]
