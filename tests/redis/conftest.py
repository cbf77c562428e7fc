"""Fixtures: real redis-server processes on free loopback ports, no persistence.

Reusable by every Redis test (client and transport): standalone servers are fresh per test
(they start in milliseconds and tests kill them); the TLS and ACL servers are per module; the
cluster is shared by the session and the sentinel set by a module, since they take seconds to
form. A missing ``redis-server`` fails with instructions; nothing skips but a test needing what
the chosen build lacks (TLS), saying so and naming the binary.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from tests.redis_servers import (
    ACL_RULES,
    ADMIN_PASSWORD,
    RedisClusterServers,
    RedisSentinelServers,
    RedisServer,
    server_build,
)
from tests.redis_servers import (
    redis_server as start_redis_server,
)
from trio_streams.redis.client import RedisClient, connect


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    """A fresh standalone server for one test (kill or restart it at will)."""
    with start_redis_server() as server:
        yield server


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    """A client of :func:`redis_server`."""
    async with connect(redis_server.url) as client:
        yield client


@pytest.fixture(scope="module")
def tls_redis_server() -> Iterator[RedisServer]:
    """A TLS-only server that requires a client certificate (files from ``server.tls``).

    On a server build without TLS the tests that need it are skipped, naming the binary."""
    if (reason := server_build().without_tls()) is not None:
        pytest.skip(reason)
    with start_redis_server(tls=True, tls_auth_clients="yes") as server:
        yield server


@pytest.fixture(scope="module")
def acl_redis_server() -> Iterator[RedisServer]:
    """A server whose default user needs :data:`ADMIN_PASSWORD`, with a limited
    :data:`ACL_USER` (keys ``app:*`` only, nothing dangerous)."""
    with start_redis_server("--requirepass", ADMIN_PASSWORD, "--user", *ACL_RULES) as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisClusterServers]:
    """Three primaries with a replica each, shared by the session (tests keep their keys
    apart)."""
    with RedisClusterServers(primaries=3, replicas=1) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def redis_sentinel() -> Iterator[RedisSentinelServers]:
    """A primary, one replica and two sentinels; tests may fail it over."""
    with RedisSentinelServers(replicas=1, sentinels=2) as servers:
        yield servers
