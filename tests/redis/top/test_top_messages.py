"""``top`` says what it cannot show: an app without metrics, streams past the SCAN limit, a named
stream that does not exist."""

from __future__ import annotations

from functools import partial

import pytest
import trio
from prometheus_client import CollectorRegistry

from tests.cli.support import cli
from tests.redis_servers import RedisServer
from trio_streams import App, MemoryBroker, MemoryStream
from trio_streams.cli.top import screen_text
from trio_streams.prometheus import PrometheusMiddleware
from trio_streams.redis.client import RedisClient
from trio_streams.running.http_endpoints import serve_endpoints
from trio_streams.top.app_watch import AppWatch, MetricsMissing
from trio_streams.top.redis_sample import MAX_STREAMS, scan_streams
from trio_streams.top.view import RedisWatch


def _app(*, metrics: bool) -> tuple[App, CollectorRegistry]:
    registry = CollectorRegistry()
    middlewares = [PrometheusMiddleware(registry=registry)] if metrics else []
    app = App("shop", middlewares=middlewares)
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(payload: bytes) -> None:
        return None

    return app, registry


async def test_top_of_an_app_without_prometheus_middleware_says_the_metrics_are_missing() -> None:
    app, registry = _app(metrics=False)
    async with app.test(), trio.open_nursery() as nursery:
        serve = partial(serve_endpoints, registry=registry)  # not the process's registry
        [url] = await nursery.start(serve, app, "127.0.0.1", 0)
        with pytest.raises(MetricsMissing, match="no trio-streams metrics") as caught:
            await AppWatch(url).refresh()
        nursery.cancel_scope.cancel()
    hint = caught.value.hint()
    assert hint is not None and "middlewares=[PrometheusMiddleware()]" in hint


async def test_top_of_an_idle_app_with_metrics_lists_it_without_complaint() -> None:
    app, _ = _app(metrics=True)
    async with app.test(), trio.open_nursery() as nursery:
        [url] = await nursery.start(serve_endpoints, app, "127.0.0.1", 0)
        watch = AppWatch(url)
        await watch.refresh()
        nursery.cancel_scope.cancel()
    assert "subscriptions" in watch.screen(sort="name", match="").title


async def _many(redis: RedisClient, count: int) -> None:
    pipeline = redis.pipeline()
    for n in range(count):
        pipeline.add("XADD", f"many{n:05d}", "*", "_payload", "x")
    await pipeline.execute()


async def test_top_with_more_than_1000_streams_says_it_shows_only_the_first_1000(
    redis: RedisClient,
) -> None:
    await _many(redis, MAX_STREAMS + 1)
    keys, more = await scan_streams(redis, "many*")
    assert more and keys == [f"many{n:05d}" for n in range(MAX_STREAMS)]
    watch = RedisWatch(redis, "test", scan_match="many*")
    await watch.refresh()
    title = watch.screen(sort="name", match="").title
    assert "1000 of 1000+ streams" in title
    assert "only the first 1000 streams found (by name) are shown" in title


async def test_top_with_exactly_1000_streams_does_not_say_some_are_left_out(
    redis: RedisClient,
) -> None:
    await _many(redis, MAX_STREAMS)
    assert await scan_streams(redis, "many*") == ([f"many{n:05d}" for n in range(1000)], False)
    watch = RedisWatch(redis, "test", scan_match="many*")
    await watch.refresh()
    assert "only the first" not in watch.screen(sort="name", match="").title


async def test_top_of_a_named_stream_that_does_not_exist_is_an_error_listing_the_streams_there(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for key in ("orders", "orders.dead", "audit"):
        await redis.execute("XADD", key, "*", "_payload", "x")
    await redis.execute("SET", "plain", "not a stream")
    args = ["top", redis_server.url, "--once"]
    args += ["--stream", "orders", "--stream", "ordres", "--stream", "plain"]
    result = await trio.to_thread.run_sync(lambda: cli(*args))
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        f"trio-streams top: error: "
        f"no streams 'ordres', 'plain' in {redis_server.url}; there: 'orders', "
        "'orders.dead', 'audit'"
    ]


async def test_a_stream_named_to_the_live_view_that_goes_away_is_noted_in_the_title(
    redis: RedisClient,
) -> None:
    await redis.execute("XADD", "orders", "*", "_payload", "x")
    await redis.execute("XADD", "gone", "*", "_payload", "x")
    watch = RedisWatch(redis, "test", streams=["orders", "gone"])
    await redis.execute("DEL", "gone")
    await watch.refresh()
    title = watch.screen(sort="name", match="").title
    assert "no such stream: 'gone' (the key does not exist or is not a stream)" in title


async def test_top_of_a_watch_with_every_stream_present_names_none_missing(
    redis: RedisClient,
) -> None:
    await redis.execute("XADD", "orders", "*", "_payload", "x")
    watch = RedisWatch(redis, "test", streams=["orders"])
    await watch.refresh()
    assert "no such stream" not in screen_text(watch.screen(sort="name", match=""))
