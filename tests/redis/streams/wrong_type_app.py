"""An app whose stream key another program may have filled with another type, for
``trio-streams run`` in ``test_wrong_type.py``. The server is named by ``TS_TEST_REDIS_URL``."""

from __future__ import annotations

import os

from trio_streams import App
from trio_streams.redis import RedisBroker, RedisStream

app = App("orders")
_redis = app.broker(RedisBroker(os.environ.get("TS_TEST_REDIS_URL", "redis://127.0.0.1:1")))


@_redis.subscriber(RedisStream("orders", group="billing"), name="bill")
async def bill(n: int) -> None:
    del n
