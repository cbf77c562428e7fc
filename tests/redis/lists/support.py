"""Helpers for the Redis list tests."""

from __future__ import annotations

from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import decode_frame


async def values(redis: RedisClient, key: str) -> list[bytes]:
    """Every value of list ``key``, left to right."""
    return [bytes(v) for v in await redis.execute("LRANGE", key, 0, -1)]


async def frames(redis: RedisClient, key: str) -> list[tuple[bytes, dict[str, str]]]:
    """Every entry of list ``key`` decoded, left to right."""
    return [decode_frame(v) for v in await values(redis, key)]


async def length(redis: RedisClient, key: str) -> int:
    return int(await redis.execute("LLEN", key))
