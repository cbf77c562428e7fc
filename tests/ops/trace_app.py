"""One side of a traced exchange, in its own process: ``python -m tests.ops.trace_app ROLE
TRANSPORT TARGET`` with ROLE ``produce`` (publishes one message) or ``consume`` (handles one,
then stops), TRANSPORT ``file`` (TARGET a path) or ``redis`` (TARGET a URL). It prints its
finished spans, one JSON object a line, as the SDK's in-memory exporter holds them."""

from __future__ import annotations

import json
import sys

import trio
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from trio_streams import App, Broker, Position
from trio_streams.core.transport import Source
from trio_streams.file import FileBroker, FileStream
from trio_streams.otel import TracingMiddleware
from trio_streams.redis import RedisBroker, RedisStream


def main(role: str, transport: str, target: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = App(role, middlewares=[TracingMiddleware(tracer_provider=provider)])
    broker: Broker
    source: Source
    if transport == "file":
        broker = app.broker(FileBroker(target))
        source = FileStream("orders").replay()
    else:
        broker = app.broker(RedisBroker(target))
        source = RedisStream("orders", group="g", start=Position.beginning())
    if role == "consume":
        done = trio.Event()

        @broker.subscriber(source)
        async def handle(n: int) -> None:
            done.set()

        async def run() -> None:
            async with trio.open_nursery() as nursery:
                running = await nursery.start(app.serve)
                with trio.fail_after(20):
                    await done.wait()
                await running.aclose()

    else:

        async def run() -> None:
            async with trio.open_nursery() as nursery:
                running = await nursery.start(app.serve)
                await broker.publish("orders", 1)
                await running.aclose()

    trio.run(run)
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        assert context is not None
        print(
            json.dumps(
                {
                    "name": span.name,
                    "kind": span.kind.name,
                    "trace_id": f"{context.trace_id:032x}",
                    "span_id": f"{context.span_id:016x}",
                    "parent": f"{span.parent.span_id:016x}" if span.parent else None,
                    "attributes": dict(span.attributes or {}),
                }
            ),
            flush=True,
        )
    trace.get_tracer_provider()  # the global provider is never touched


if __name__ == "__main__":
    main(*sys.argv[1:4])
