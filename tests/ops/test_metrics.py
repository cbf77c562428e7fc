"""Prometheus metrics scraped over HTTP from a running app after known traffic, and the health
endpoints."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import trio
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from trio_streams import (
    App,
    ConfigurationError,
    Context,
    MemoryBroker,
    MemoryStream,
    Outcome,
    Position,
    ack,
    retry,
)
from trio_streams.prometheus import PrometheusMiddleware
from trio_streams.running.http_endpoints import EndpointError, serve_endpoints

from .http_client import get


@dataclass
class Order:
    id: int


def samples(text: bytes) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    found = {}
    for family in text_string_to_metric_families(text.decode()):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


async def test_metrics_scraped_over_http_count_exactly_what_the_app_did() -> None:
    registry = CollectorRegistry()
    app = App("shop", middlewares=[PrometheusMiddleware(registry=registry)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), max_attempts=2, dead_letter="dlq", name="bill")
    @broker.publisher("receipts")
    async def bill(order: Order, ctx: Context) -> int | Outcome:
        if order.id == 2 and ctx.attempt == 1:
            return retry()
        if order.id == 3:
            raise ValueError("bad order")
        return order.id

    async with app.test() as t, trio.open_nursery() as nursery:
        [url] = await nursery.start(serve_endpoints, app, "127.0.0.1", 0)
        for n in (1, 2, 3, 4):
            await t.publish("orders", Order(n))
        await t.publish("orders", b"not json")
        status, headers, body = await get(url, "/metrics")
        nursery.cancel_scope.cancel()
    assert status == 200 and headers["content-type"].startswith("text/plain")
    got = samples(body)

    def value(name: str, **labels: str) -> float:
        return got.get((f"trio_streams_{name}", tuple(sorted(labels.items()))), 0.0)

    sub = {"subscription": "bill"}
    # 1, 2 (twice), 3 (twice: tried, then spent), 4, and the undecodable one.
    assert value("received_total", **sub) == 7
    assert value("handled_total", outcome="ack", **sub) == 3
    assert value("handled_total", outcome="retry", **sub) == 2  # 2's retry, 3's first failure
    # 3 spent, and the undecodable one (a dead letter is configured, so it goes there too).
    assert value("handled_total", outcome="dead_letter", **sub) == 2
    assert value("handled_total", outcome="drop", **sub) == 0
    assert value("retries_total", **sub) == 2
    assert value("dead_letters_total", **sub) == 2
    assert value("decode_failures_total", **sub) == 1
    assert value("handler_duration_seconds_count", **sub) == 7
    # The three receipts published (and the test's own five publishes, through the broker).
    assert value("published_total", broker="memory", destination="receipts") == 3
    assert value("in_flight", **sub) == 0 and value("channel_depth", **sub) == 0
    assert value("up") == 1


async def test_healthz_is_alive_and_readyz_says_ready_only_while_running() -> None:
    app = App("shop")
    app.broker(MemoryBroker())
    async with trio.open_nursery() as nursery:
        [url] = await nursery.start(serve_endpoints, app, "127.0.0.1", 0)
        assert (await get(url, "/readyz"))[0] == 503  # stopped: not ready
        assert (await get(url, "/healthz"))[0] == 503
        running = await nursery.start(app.serve)
        status, _, body = await get(url, "/readyz")
        assert status == 200 and body == b'{"state": "running", "reason": null}\n'
        assert (await get(url, "/healthz"))[0] == 200
        assert (await get(url, "/nowhere"))[0] == 404
        await running.aclose()
        assert (await get(url, "/readyz"))[0] == 503
        nursery.cancel_scope.cancel()


@pytest.mark.slow
async def test_top_once_shows_a_running_apps_subscriptions_from_its_http_endpoint() -> None:
    registry = CollectorRegistry()
    app = App("shop", middlewares=[PrometheusMiddleware(registry=registry)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order, ctx: Context) -> Outcome:
        return retry() if order.id == 2 and ctx.attempt == 1 else ack()

    async with app.test() as t, trio.open_nursery() as nursery:
        [url] = await nursery.start(serve_endpoints, app, "127.0.0.1", 0)
        for n in (1, 2, 3):
            await t.publish("orders", Order(n))
        result = await trio.run_process(
            [
                sys.executable,
                "-m",
                "trio_streams",
                "top",
                url,
                "--once",
                "--interval",
                "0.2",
            ],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
        nursery.cancel_scope.cancel()
    assert result.returncode == 0, result.stderr
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith(f"{url}: running, 1 subscriptions, rates over")
    header = next(line.split() for line in lines if line.startswith("SUBSCRIPTION"))
    cells = next(line.split() for line in lines if line.startswith("bill"))
    row = dict(zip(header, cells, strict=True))
    assert row["ACK"] == "3" and row["RETRY"] == "1" and row["RETRIES"] == "1"
    assert row["IN-FLIGHT"] == "0" and row["DEGRADED"] == "no"
    assert row["RECEIVED/S"] == "0.0"  # nothing arrived between the two samples


@pytest.mark.slow
async def test_top_names_an_endpoint_that_does_not_answer() -> None:
    result = await trio.run_process(
        [sys.executable, "-m", "trio_streams", "top", "http://127.0.0.1:1", "--once"],
        capture_stdout=True,
        capture_stderr=True,
        check=False,
    )
    assert result.returncode == 1
    assert result.stderr.decode().startswith(
        "trio-streams top: error: cannot read http://127.0.0.1:1/metrics"
    )


async def test_a_prometheus_middleware_on_a_broker_also_reports_the_subscriptions_state() -> None:
    registry = CollectorRegistry()
    app = App("shop")
    broker = app.broker(MemoryBroker(middlewares=[PrometheusMiddleware(registry=registry)]))

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order) -> None: ...

    async with app.test() as t, trio.open_nursery() as nursery:
        # The app's own middleware's registry is found by the endpoint (not given here).
        [url] = await nursery.start(serve_endpoints, app, "127.0.0.1", 0)
        await t.publish("orders", Order(1))
        _, _, body = await get(url, "/metrics")
        nursery.cancel_scope.cancel()
    got = samples(body)
    assert got[("trio_streams_received_total", (("subscription", "bill"),))] == 1
    assert got[("trio_streams_in_flight", (("subscription", "bill"),))] == 0
    assert got[("trio_streams_up", ())] == 1


def test_two_metrics_middlewares_on_one_registry_are_a_clear_configuration_error() -> None:
    registry = CollectorRegistry()
    PrometheusMiddleware(registry=registry)
    with pytest.raises(ConfigurationError, match="already holds trio_streams_\\* metrics"):
        PrometheusMiddleware(registry=registry)


async def test_an_http_address_in_use_is_a_typed_error_naming_it() -> None:
    app = App("shop")
    app.broker(MemoryBroker())
    with trio.socket.socket() as taken:
        await taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(EndpointError, match=f"--http 127.0.0.1:{port}: cannot listen there"):
            await serve_endpoints(app, "127.0.0.1", port)


async def test_lag_is_a_stream_files_unread_bytes_and_a_redis_groups_unread_entries(
    tmp_path: Path,
) -> None:
    from tests.redis.client.redis_waits import eventually
    from tests.redis_servers import redis_server
    from trio_streams.file import FileBroker, FileStream
    from trio_streams.file.writer import StreamWriter
    from trio_streams.redis import RedisBroker, RedisStream
    from trio_streams.redis.client import connect

    path = tmp_path / "orders.ss"
    writer = StreamWriter(path)
    for n in range(40):
        writer.append("orders", str(n).encode() * 100, 1_700_000_000_000 + n)
    writer.close()
    with redis_server() as server:
        async with connect(server.url) as redis:
            for n in range(50):
                await redis.execute("XADD", "jobs", "*", "_payload", str(n))
        registry = CollectorRegistry()
        app = App("shop", middlewares=[PrometheusMiddleware(registry=registry)])
        files = app.broker(FileBroker(path))
        streams = app.broker(RedisBroker(server.url))
        hold = trio.Event()

        @files.subscriber(FileStream("orders").replay(), name="file", buffer=1, count=1)
        async def from_file(n: int) -> None:
            await hold.wait()

        @streams.subscriber(
            RedisStream("jobs", group="g", start=Position.beginning()), name="group", count=5
        )
        async def from_group(n: int) -> None:
            await hold.wait()

        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            [url] = await nursery.start(serve_endpoints, app, "127.0.0.1", 0)
            got: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}

            async def lag_known() -> bool:
                got.update(samples((await get(url, "/metrics"))[2]))
                lag = got.get(("trio_streams_lag_messages", (("subscription", "group"),)), 0)
                return 0 < lag < 50  # known, after the group's first reads

            await eventually(lag_known, within=20, what="the group's lag")
            hold.set()
            await running.aclose()
            nursery.cancel_scope.cancel()
    file_lag = got[("trio_streams_lag_bytes", (("subscription", "file"),))]
    assert 0 < file_lag < path.stat().st_size  # read some, far from all (the handler holds)
    group_lag = got[("trio_streams_lag_messages", (("subscription", "group"),))]
    assert 0 < group_lag < 50  # the group read a few reads' worth, not the rest
