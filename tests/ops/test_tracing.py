"""OpenTelemetry: a consumer span per delivery and a producer span per publish, following the
messaging semantic conventions, with the trace context in the headers, so a trace crosses
files, Redis and processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from tests.redis_servers import redis_server
from tests.support import serving
from trio_streams import App, Context, MemoryBroker, MemoryStream
from trio_streams.otel import TracingMiddleware

ROOT = Path(__file__).resolve().parents[2]


def tracing() -> tuple[TracingMiddleware, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return TracingMiddleware(tracer_provider=provider), exporter


async def test_a_consumer_span_per_delivery_and_a_producer_span_per_publish_in_one_trace() -> None:
    middleware, exporter = tracing()
    app = App("shop", middlewares=[middleware])
    broker = app.broker(MemoryBroker())
    seen: list[str] = []

    @broker.subscriber(MemoryStream("orders"), name="bill")
    @broker.publisher("receipts")
    async def bill(n: int, ctx: Context) -> int:
        seen.append(ctx.headers["traceparent"])
        return n

    @broker.subscriber(MemoryStream("receipts"), name="note", max_attempts=1)
    async def note(n: int) -> None:
        raise ValueError("cannot note")

    async with app.test() as t:
        await t.publish("orders", 5)
    spans = {span.name: span for span in exporter.get_finished_spans()}
    assert set(spans) == {"send orders", "process orders", "send receipts", "process receipts"}
    send, process = spans["send orders"], spans["process orders"]
    result, noted = spans["send receipts"], spans["process receipts"]
    assert send.kind is SpanKind.PRODUCER and process.kind is SpanKind.CONSUMER
    trace_ids = {s.context.trace_id for s in spans.values() if s.context is not None}
    assert len(trace_ids) == 1  # one trace, from the first publish to the last handler
    assert process.parent is not None and send.context is not None
    assert process.parent.span_id == send.context.span_id
    assert result.parent is not None and process.context is not None
    assert result.parent.span_id == process.context.span_id  # published inside the handler
    assert noted.parent is not None and result.context is not None
    assert noted.parent.span_id == result.context.span_id
    attributes = dict(process.attributes or {})
    assert attributes["messaging.system"] == "trio_streams.memory"
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.destination.name"] == "orders"
    assert attributes["messaging.message.delivery_count"] == 1
    assert attributes["trio_streams.outcome"] == "ack"
    assert noted.status.status_code is StatusCode.ERROR
    assert dict(noted.attributes or {})["trio_streams.outcome"] == "drop"
    assert seen and seen[0].startswith("00-")  # W3C traceparent in the message's headers


def run_side(role: str, transport: str, target: str) -> list[dict[str, Any]]:
    result = subprocess.run(
        [sys.executable, "-m", "tests.ops.trace_app", role, transport, target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def assert_one_trace_across(produced: list[dict[str, Any]], consumed: list[dict[str, Any]]) -> None:
    [send] = [s for s in produced if s["name"] == "send orders"]
    [process] = [s for s in consumed if s["name"] == "process orders"]
    assert send["kind"] == "PRODUCER" and process["kind"] == "CONSUMER"
    assert process["trace_id"] == send["trace_id"]
    assert process["parent"] == send["span_id"]


@pytest.mark.slow
@pytest.mark.parametrize("transport", ["file", "redis"])
def test_a_trace_crosses_two_processes_through_the_transport(
    transport: str, tmp_path: Path
) -> None:
    if transport == "file":
        target = str(tmp_path / "orders.ss")
        produced = run_side("produce", transport, target)
        consumed = run_side("consume", transport, target)
        assert_one_trace_across(produced, consumed)
        return
    with redis_server() as server:
        produced = run_side("produce", transport, server.url)
        consumed = run_side("consume", transport, server.url)
    assert_one_trace_across(produced, consumed)
    [process] = [s for s in consumed if s["name"] == "process orders"]
    assert process["attributes"]["messaging.system"] == "redis"
    assert process["attributes"]["messaging.consumer.group.name"] == "g"


async def test_messaging_system_comes_from_the_brokers_kind_not_its_name() -> None:
    from trio_streams.redis import RedisBroker, RedisStream

    middleware, exporter = tracing()
    app = App("shop", middlewares=[middleware])
    broker = app.broker(RedisBroker("redis://127.0.0.1:1", name="orders-db"))

    @broker.subscriber(RedisStream("orders", group="g"))
    async def bill(n: int) -> None: ...

    async with app.test() as t:
        await t.publish("orders", 1)
    systems = {dict(s.attributes or {})["messaging.system"] for s in exporter.get_finished_spans()}
    assert systems == {"redis"}


async def test_a_delivery_cancelled_by_a_stop_is_not_an_error_span(
    autojump_clock: trio.testing.MockClock,
) -> None:
    middleware, exporter = tracing()
    app = App("shop", shutdown_timeout=1.0, middlewares=[middleware])
    broker = app.broker(MemoryBroker())
    started = trio.Event()

    @broker.subscriber(MemoryStream("orders"))
    async def stuck(n: int) -> None:
        started.set()
        await trio.sleep_forever()

    async with serving(app):
        await broker.publish("orders", 1)
        await started.wait()
    [process] = [s for s in exporter.get_finished_spans() if s.name == "process orders"]
    assert process.status.status_code is not StatusCode.ERROR
    assert dict(process.attributes or {})["trio_streams.cancelled"] is True
