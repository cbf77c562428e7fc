"""Apps that ``trio-streams run --workers`` / ``--reload`` runs in the tests.

The Redis server is named by ``TS_TEST_REDIS_URL``. Each handled entry of ``jobs`` is noted in
Redis (``SADD handled <n>``, and ``RPUSH by <worker>:<n>``), so the test sees what every worker
did, including the ones it killed.
"""

from __future__ import annotations

import os

import trio

from trio_streams import App, Context, Position
from trio_streams.file import FileBroker, FileStream
from trio_streams.integrations.prometheus import PrometheusMiddleware
from trio_streams.redis import RedisBroker, RedisStream

URL = os.environ.get("TS_TEST_REDIS_URL", "redis://127.0.0.1:1")
WORKER = os.environ.get("TRIO_STREAMS_WORKER", "-")

# A consumer group shared by the workers; each takes a few milliseconds per entry. What a
# handler notes travels with its acknowledgement (the pipeline window).
group = App("group")
_redis = group.broker(RedisBroker(URL))


@_redis.subscriber(
    RedisStream("jobs", group="g", start=Position.beginning(), min_idle=0.5),
    count=10,
    block=50,
    pipeline=True,
)
async def work(n: int, ctx: Context) -> None:
    await trio.sleep(0.002)
    ctx.pipeline.sadd("handled", n)
    ctx.pipeline.rpush("by", f"{WORKER}:{n}")


@group.on_startup
async def say_which() -> None:
    # One write: the workers share the supervisor's output.
    os.write(1, f"worker {WORKER} pid {os.getpid()} up\n".encode())


# A stream-file subscription: every worker would read every message.
broadcast = App("broadcast")
_file = broadcast.broker(FileBroker(os.environ.get("TS_TEST_FILE", "broadcast.ss")))


@_file.subscriber(FileStream("orders").replay())
async def read(n: int) -> None: ...


# A consumer name fixed in the code: N workers would be one consumer.
named = App("named")
_named = named.broker(RedisBroker(URL))


@_named.subscriber(RedisStream("jobs", group="g", consumer="c1"))
async def named_work(n: int) -> None: ...


# Never starts: its startup hook fails, in every worker, every time.
crashing = App("crashing")
crashing.broker(RedisBroker(URL))


@crashing.on_startup
async def fail() -> None:
    raise RuntimeError("database unreachable")


# A shared group whose metrics the supervisor's --http endpoint serves for the whole app.
metered = App("metered", middlewares=[PrometheusMiddleware()])
_metered = metered.broker(RedisBroker(URL))


@_metered.subscriber(
    RedisStream("metered", group="g", start=Position.beginning(), min_idle=0.5),
    name="count",
    count=10,
    block=50,
)
async def count(n: int) -> None: ...
