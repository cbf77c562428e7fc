"""Fixtures: a real redis-server per test (the package's own helper) and a fault proxy in front
of it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

from trio_streams.testing.faults import FaultProxy
from trio_streams.testing.servers import RedisServer


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A fresh standalone server, no persistence, on a free loopback port."""
    with RedisServer() as server:
        yield server


@pytest.fixture
async def proxy(server: RedisServer) -> AsyncIterator[FaultProxy]:
    """A proxy in front of :func:`server`, seed 0."""
    async with FaultProxy.in_front_of(server) as proxy:
        yield proxy
