"""Entries deleted (``XDEL``, or trimmed) while pending are counted where an operator looks: in
the subscription's stats and in the Prometheus metrics, whichever read found them (this
consumer's own pending list, or the reclaim of another consumer's)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Position, RunningApp
from trio_streams.prometheus import PrometheusMiddleware
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient

from .support import pending_count


def scraped(registry: CollectorRegistry) -> float | None:
    """``trio_streams_deleted_while_pending_total`` of subscription ``sub``, as scraped."""
    for family in text_string_to_metric_families(generate_latest(registry).decode()):
        for sample in family.samples:
            if sample.name == "trio_streams_deleted_while_pending_total":
                assert sample.labels == {"subscription": "sub"}
                return sample.value
    return None


@asynccontextmanager
async def consuming(
    url: str, registry: CollectorRegistry, handled: list[int], *, min_idle: float = 60.0
) -> AsyncIterator[RunningApp]:
    app = App("svc", middlewares=[PrometheusMiddleware(registry=registry)])
    broker = app.broker(RedisBroker(url))
    source = RedisStream(
        "s", group="g", consumer="c1", start=Position.beginning(), min_idle=min_idle
    )

    @broker.subscriber(source, name="sub", block=50)
    async def handle(n: int) -> None:
        handled.append(n)

    async with serving(app) as running:
        yield running


async def _pending_for(redis: RedisClient, consumer: str, count: int) -> None:
    for n in range(1, count + 1):
        await redis.execute("XADD", "s", f"0-{n}", "_payload", str(n))
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    await redis.execute("XREADGROUP", "GROUP", "g", consumer, "STREAMS", "s", ">")


async def test_entries_deleted_from_the_own_pending_list_are_in_stats_and_metrics(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await _pending_for(redis, "c1", 4)  # this consumer's, from before a restart
    await redis.execute("XDEL", "s", "0-2", "0-3")
    registry = CollectorRegistry()
    handled: list[int] = []
    async with consuming(redis_server.url, registry, handled) as running:

        async def both_handled() -> bool:
            await trio.lowlevel.checkpoint()
            return sorted(handled) == [1, 4]

        async def all_acknowledged() -> bool:
            # A handler's return comes before its ack's flush: wait for the flush, not the run.
            return await pending_count(redis, "s", "g") == 0

        await eventually(both_handled, within=10, what="the entries left handled")
        await eventually(all_acknowledged, within=10, what="the handled entries acknowledged")
        assert running.stats()["sub"].deleted_while_pending == 2
        assert scraped(registry) == 2


async def test_entries_deleted_from_another_consumers_pending_list_are_counted_at_reclaim(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await _pending_for(redis, "c0", 3)  # a consumer that died holding them
    await redis.execute("XDEL", "s", "0-1", "0-3")
    registry = CollectorRegistry()
    handled: list[int] = []
    async with consuming(redis_server.url, registry, handled, min_idle=0.2) as running:

        async def counted() -> bool:
            await trio.lowlevel.checkpoint()
            return running.stats()["sub"].deleted_while_pending == 2 and handled == [2]

        async def all_acknowledged() -> bool:
            return await pending_count(redis, "s", "g") == 0

        await eventually(counted, within=10, what="the deleted entries counted at reclaim")
        await eventually(all_acknowledged, within=10, what="the handled entry acknowledged")
        assert scraped(registry) == 2
