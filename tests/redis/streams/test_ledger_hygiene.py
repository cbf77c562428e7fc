"""The attempt ledger holds fields only for entries still pending: the hygiene pass sweeps the
rest (a crash between an acknowledgement and its field's removal leaves one behind)."""

from __future__ import annotations

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.attempts import ledger_key
from trio_streams.redis.client import RedisClient


async def test_fields_of_entries_no_longer_pending_are_swept_and_the_others_kept(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await redis.execute("XADD", "s", "0-1", "_payload", "1")  # read by a consumer that hangs
    await redis.execute("XGROUP", "SETID", "s", "g", "0")
    await redis.execute("XREADGROUP", "GROUP", "g", "other", "STREAMS", "s", ">")
    ledger = ledger_key("s", "g")
    await redis.execute("HSET", ledger, "0-1", 1, "9-9", 2)  # 9-9 was acknowledged long ago
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    # remove_idle_consumers=1: the hygiene pass every half second, not every 30.
    @broker.subscriber(RedisStream("s", group="g", remove_idle_consumers=1), block=20)
    async def handle(n: int) -> None: ...

    async with serving(app):

        async def swept() -> bool:
            return bool(await redis.execute("HEXISTS", ledger, "9-9") == 0)

        await eventually(swept, within=10, what="the stale field swept")
    assert await redis.execute("HGET", ledger, "0-1") == b"1"  # still pending: kept
