"""``top`` calls a consumer stuck by the same measure on every server: time since it last took
an entry (``inactive`` where the server reports it, else ``idle``), so a consumer that holds
entries and keeps polling is stuck on Redis 7.2+ and Valkey as it is on Redis 7.0."""

from __future__ import annotations

from tests.redis.client.redis_waits import eventually
from trio_streams.redis.client import RedisClient
from trio_streams.top import redis_rows, sample_redis


async def test_a_consumer_that_holds_entries_and_keeps_polling_is_stuck_on_every_server(
    redis: RedisClient,
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await redis.execute("XADD", "s", "*", "f", "v")
    await redis.execute("XREADGROUP", "GROUP", "g", "busy", "STREAMS", "s", ">")

    async def quiet() -> bool:
        [row] = redis_rows(await sample_redis(redis, ["s"], now=1.0), None, stuck_after=0.3)
        return row.groups[0].stuck == ("busy",)

    await eventually(quiet, within=10, what="the consumer quiet for 0.3 s")
    # It polls again (nothing new): on newer servers this resets `idle`, not what top shows.
    await redis.execute("XREADGROUP", "GROUP", "g", "busy", "BLOCK", 10, "STREAMS", "s", ">")
    [row] = redis_rows(await sample_redis(redis, ["s"], now=2.0), None, stuck_after=0.3)
    [group] = row.groups
    assert group.stuck == ("busy",)
    [consumer] = group.consumers
    assert consumer.pending == 1 and consumer.idle_ms >= 300
