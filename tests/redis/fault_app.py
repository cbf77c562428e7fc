"""An app for ``trio-streams run`` whose server the tests stop: one consumer group on stream
``orders`` of the server at ``TS_TEST_REDIS_URL``, reclaiming every 0.2 s, so that the faults
``connection``, ``reclaim`` and ``delayed`` begin soon after the server is gone. Its dead
letters go to ``TS_TEST_DEAD_LETTER``, if set."""

from __future__ import annotations

import os

from trio_streams import App, Position
from trio_streams.redis import RedisBroker, RedisStream

app = App("faults")
broker = app.broker(
    RedisBroker(os.environ["TS_TEST_REDIS_URL"] + "?backoff_initial=0.01&backoff_cap=0.1")
)


@broker.subscriber(
    RedisStream("orders", group="g", start=Position.beginning(), min_idle=0.4),
    name="orders",
    block=50,
    dead_letter=os.environ.get("TS_TEST_DEAD_LETTER"),
)
async def handle(n: int) -> None: ...
