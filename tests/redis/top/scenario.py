"""A scripted deployment for ``top``: known rates, a stuck consumer, a growing dead letter."""

from __future__ import annotations

from trio_streams.redis.client import RedisClient
from trio_streams.redis.delays import delay_key


async def add(redis: RedisClient, key: str, count: int, **headers: str) -> None:
    pipeline = redis.pipeline()
    for _ in range(count):
        fields = [b"_payload", b"{}"]
        for name, value in headers.items():
            fields += [f"h:{name.replace('_', '-')}".encode(), value.encode()]
        pipeline.add("XADD", key, "*", *fields)
    (await pipeline.execute()).raise_first()


async def read(redis: RedisClient, consumer: str, count: int) -> list[bytes]:
    reply = await redis.execute(
        "XREADGROUP", "GROUP", "workers", consumer, "COUNT", count, "STREAMS", "orders", ">"
    )
    entries = next(iter(reply.values())) if isinstance(reply, dict) else reply[0][1]
    return [entry[0] for entry in entries]


async def setup(redis: RedisClient) -> None:
    """Before the first snapshot: 10 entries, a group, one dead letter, three delayed retries
    (two due, one in an hour)."""
    await add(redis, "orders", 10)
    await redis.execute("XGROUP", "CREATE", "orders", "workers", "0")
    await read(redis, "fast", 10)
    await redis.execute("XACK", "orders", "workers", *(await _pending(redis, "fast")))
    await add(redis, "orders.dead", 1, x_dead_letter_stream="orders")
    await redis.execute("ZADD", delay_key("orders"), 0, b"due-1", 1, b"due-2")
    await redis.execute("ZADD", delay_key("orders"), 99_999_999_999_999, b"later")


async def between(redis: RedisClient) -> None:
    """Between the snapshots (2 s apart by the injected clock): 50 entries added, 35 delivered
    (30 to ``fast``, which acks them all; 5 to ``stuck``, which never acks), 4 dead letters."""
    await add(redis, "orders", 50)
    ids = await read(redis, "fast", 30)
    await redis.execute("XACK", "orders", "workers", *ids)
    await read(redis, "stuck", 5)
    await add(redis, "orders.dead", 4, x_dead_letter_stream="orders")


async def _pending(redis: RedisClient, consumer: str) -> list[bytes]:
    rows = await redis.execute("XPENDING", "orders", "workers", "-", "+", 100, consumer)
    return [row[0] for row in rows]
