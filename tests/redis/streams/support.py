"""Helpers for the Redis stream transport's tests (waits: ``tests.redis.client.redis_waits``)."""

from __future__ import annotations

from typing import Any

from trio_streams.redis.client import RedisClient


async def pending_count(redis: RedisClient, key: str, group: str) -> int:
    """Entries in ``group``'s pending list."""
    summary: Any = await redis.execute("XPENDING", key, group)
    return int(summary[0])


async def entries(redis: RedisClient, key: str) -> list[tuple[str, dict[str, bytes]]]:
    """Every entry of ``key`` as (id, fields)."""
    out = []
    for entry_id, fields in await redis.execute("XRANGE", key, "-", "+"):
        pairs = dict(zip(fields[::2], fields[1::2], strict=True))
        out.append((entry_id.decode(), {k.decode(): v for k, v in pairs.items()}))
    return out
