"""What metrics and tracing do once per subscription rather than per delivery, and what they
skip, with the same figures and spans as doing it all per delivery.

- Metrics bind a subscription's counters once (``ack_counter``) and count its plain acks there,
  with no record; every other verdict still goes to ``observe``.
- Tracing builds a subscription's span name and shared attributes once; a delivery adds only
  its own (its id; a later attempt's count, a request's conversation id) to a copy; a span that
  does not record gets none of them, and the trace context still passes on.
- A handler that takes the payload alone is handled in line inside the middlewares' hooks, with
  the call record the general way fills.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import trio
import trio.testing
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF
from opentelemetry.trace import NonRecordingSpan, Span, SpanKind
from prometheus_client import CollectorRegistry

from tests.support import serving
from trio_streams import (
    App,
    Context,
    HandlerCall,
    MemoryBroker,
    MemoryStream,
    Middleware,
    Outcome,
    retry,
)
from trio_streams.core.dispatch import HandledMessage
from trio_streams.otel import TracingMiddleware
from trio_streams.prometheus import PrometheusMiddleware

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@dataclass
class Order:
    id: int


# ---- metrics -------------------------------------------------------------------------------


class CountingPrometheus(PrometheusMiddleware):
    """Notes each subscription its ack counter is asked for, and each record ``observe`` gets."""

    def __init__(self) -> None:
        super().__init__(registry=CollectorRegistry())
        self.bound: list[str] = []
        self.observed: list[HandledMessage] = []

    def ack_counter(self, subscription: str) -> Callable[[float | None], None]:
        self.bound.append(subscription)
        return super().ack_counter(subscription)

    def observe(self, handled: HandledMessage) -> None:
        self.observed.append(handled)
        super().observe(handled)


class Observing(Middleware):
    """An ``observe`` hook without an ack counter: told of every verdict with a record."""

    def __init__(self) -> None:
        self.observed: list[HandledMessage] = []

    def observe(self, handled: HandledMessage) -> None:
        self.observed.append(handled)


def value(metrics: PrometheusMiddleware, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(f"trio_streams_{name}", labels)


async def test_metrics_bind_a_subscriptions_ack_counter_once_not_per_delivery() -> None:
    metrics = CountingPrometheus()
    app = App("svc", middlewares=[metrics])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order) -> None: ...

    @broker.subscriber(MemoryStream("orders"), name="audit")
    async def audit(order: Order, ctx: Context) -> None: ...  # the general way

    async with app.test() as t:
        for n in range(5):
            await t.publish("orders", Order(n))
    assert sorted(metrics.bound) == ["audit", "bill"]
    for name in ("bill", "audit"):
        assert value(metrics, "received_total", subscription=name) == 5
        assert value(metrics, "handled_total", subscription=name, outcome="ack") == 5
        assert value(metrics, "handler_duration_seconds_count", subscription=name) == 5


async def test_a_plain_ack_reaches_the_ack_counter_instead_of_observe_with_the_same_figures() -> (
    None
):
    metrics = CountingPrometheus()
    app = App("svc", middlewares=[metrics])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill", max_attempts=2, dead_letter="dlq")
    async def bill(order: Order) -> Outcome | None:
        if order.id == 1:
            raise ValueError("no")  # a retry, then a dead letter
        if order.id == 2:
            return retry()  # a retry, then the attempts cap: a dead letter
        return None

    async with app.test() as t:
        for n in range(4):
            await t.publish("orders", Order(n))
        await t.publish("orders", b"not json")  # dead-lettered too
    # Not one of the three acks (0 and 3) reached observe: every other verdict did.
    outcomes = sorted(
        "dead_letter" if h.verdict.dead_letter else h.verdict.outcome.kind.value
        for h in metrics.observed
    )
    assert outcomes == ["dead_letter", "dead_letter", "dead_letter", "retry", "retry"]
    assert value(metrics, "received_total", subscription="bill") == 7
    assert value(metrics, "handled_total", subscription="bill", outcome="ack") == 2
    assert value(metrics, "handled_total", subscription="bill", outcome="retry") == 2
    assert value(metrics, "handled_total", subscription="bill", outcome="dead_letter") == 3
    assert value(metrics, "handled_total", subscription="bill", outcome="drop") == 0
    assert value(metrics, "retries_total", subscription="bill") == 2
    assert value(metrics, "dead_letters_total", subscription="bill") == 3
    assert value(metrics, "decode_failures_total", subscription="bill") == 1
    assert value(metrics, "handler_duration_seconds_count", subscription="bill") == 7


async def test_metrics_alone_count_in_line_acks_with_their_seconds_outside_the_harness() -> None:
    """Served without the test harness (whose observer needs a record), metrics are all there
    is to tell of an in-line ack: it is counted with its seconds, and nothing else is built."""
    metrics = CountingPrometheus()
    app = App("svc", middlewares=[metrics])
    broker = app.broker(MemoryBroker())
    done = trio.Event()
    seen: list[int] = []

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order) -> None:
        seen.append(order.id)
        if len(seen) == 4:
            done.set()

    async with serving(app):
        for n in range(4):
            await broker.publish("orders", Order(n))
        with trio.fail_after(10):
            await done.wait()
            # The last ack is counted after its handler returns: once every task waits.
            await trio.testing.wait_all_tasks_blocked()
    assert metrics.bound == ["bill"] and metrics.observed == []
    assert value(metrics, "handled_total", subscription="bill", outcome="ack") == 4
    assert value(metrics, "handler_duration_seconds_count", subscription="bill") == 4
    total = value(metrics, "handler_duration_seconds_sum", subscription="bill")
    assert total is not None and total > 0


async def test_an_observe_hook_without_an_ack_counter_is_still_told_of_every_ack() -> None:
    metrics, observing = CountingPrometheus(), Observing()
    app = App("svc", middlewares=[metrics, observing])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order) -> None: ...

    async with app.test() as t:
        for n in range(3):
            await t.publish("orders", Order(n))
    assert [h.message for h in observing.observed] == [Order(0), Order(1), Order(2)]
    assert all(h.seconds is not None and h.seconds >= 0 for h in observing.observed)
    assert metrics.observed == []
    assert value(metrics, "handled_total", subscription="bill", outcome="ack") == 3


# ---- tracing -------------------------------------------------------------------------------


class SpyingTracer(trace.Tracer):
    """Notes what each span is started with, and the calls made on the spans it hands out."""

    def __init__(self, inner: trace.Tracer, started: list[tuple[str, Any]], calls: list[str]):
        self.inner, self.started, self.calls = inner, started, calls

    def start_span(self, name: str, *args: Any, **kwargs: Any) -> Span:
        self.started.append((name, kwargs.get("attributes")))
        return SpyingSpan(self.inner.start_span(name, *args, **kwargs), self.calls)

    def start_as_current_span(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.start_as_current_span(*args, **kwargs)


class SpyingSpan(NonRecordingSpan):
    """A span that passes every call on to ``inner`` and notes the ones that do work."""

    def __init__(self, inner: Span, calls: list[str]) -> None:
        super().__init__(inner.get_span_context())
        self.inner, self.calls = inner, calls

    def is_recording(self) -> bool:
        return self.inner.is_recording()

    def set_attribute(self, key: str, value: Any) -> None:
        self.calls.append(f"set_attribute {key}")
        self.inner.set_attribute(key, value)

    def set_attributes(self, attributes: Mapping[str, Any]) -> None:
        self.calls.append("set_attributes")
        self.inner.set_attributes(attributes)

    def record_exception(self, exception: BaseException, *args: Any, **kwargs: Any) -> None:
        self.calls.append("record_exception")
        self.inner.record_exception(exception, *args, **kwargs)

    def set_status(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append("set_status")
        self.inner.set_status(*args, **kwargs)

    def end(self, end_time: int | None = None) -> None:
        self.calls.append("end")
        self.inner.end(end_time)


class SpyingProvider(trace.TracerProvider):
    def __init__(self, inner: trace.TracerProvider) -> None:
        self.inner = inner
        self.started: list[tuple[str, Any]] = []
        self.calls: list[str] = []

    def get_tracer(self, *args: Any, **kwargs: Any) -> trace.Tracer:
        return SpyingTracer(self.inner.get_tracer(*args, **kwargs), self.started, self.calls)


def recorded() -> tuple[SpyingProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return SpyingProvider(provider), exporter


def processed(started: Sequence[tuple[str, Any]]) -> list[Any]:
    return [attributes for name, attributes in started if name.startswith("process ")]


async def test_a_subscriptions_span_attributes_are_built_once_and_a_delivery_adds_its_own() -> None:
    spying, exporter = recorded()
    app = App("shop", middlewares=[TracingMiddleware(tracer_provider=spying)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order) -> None: ...

    async with app.test() as t:
        for n in range(3):
            await t.publish("orders", Order(n))
    shared = processed(spying.started)
    assert len(shared) == 3 and shared[0] is shared[1] is shared[2]  # one mapping, built once
    spans = [s for s in exporter.get_finished_spans() if s.name == "process orders"]
    ids = [dict(s.attributes or {})["messaging.message.id"] for s in spans]
    assert len(set(ids)) == 3  # each delivery's own id, on its own span
    for span in spans:
        attributes = dict(span.attributes or {})
        assert span.kind is SpanKind.CONSUMER
        assert attributes["messaging.system"] == "trio_streams.memory"
        assert attributes["messaging.destination.name"] == "orders"
        assert attributes["trio_streams.subscription"] == "bill"
        assert attributes["messaging.message.delivery_count"] == 1
        assert attributes["trio_streams.outcome"] == "ack"


async def test_a_later_attempt_gets_its_own_delivery_count_and_leaves_the_shared_one_alone() -> (
    None
):
    spying, exporter = recorded()
    app = App("shop", middlewares=[TracingMiddleware(tracer_provider=spying)])
    broker = app.broker(MemoryBroker())
    attempts: list[int] = []

    @broker.subscriber(MemoryStream("orders"), name="bill", max_attempts=3)
    async def bill(order: Order) -> None:
        attempts.append(order.id)
        if len(attempts) < 3:
            raise ValueError("not yet")

    async with app.test() as t:
        await t.publish("orders", Order(1))
        await t.publish("orders", Order(2))
    spans = [s for s in exporter.get_finished_spans() if s.name == "process orders"]
    counts = sorted(
        cast(int, dict(s.attributes or {})["messaging.message.delivery_count"]) for s in spans
    )
    assert counts == [1, 1, 2, 3]
    first_attempts = [
        a for a in processed(spying.started) if a["messaging.message.delivery_count"] == 1
    ]
    assert len(first_attempts) == 2 and first_attempts[0] is first_attempts[1]
    assert first_attempts[0]["messaging.message.delivery_count"] == 1


async def test_a_span_that_does_not_record_gets_no_attribute_status_or_exception() -> None:
    spying = SpyingProvider(TracerProvider(sampler=ALWAYS_OFF))
    app = App("shop", middlewares=[TracingMiddleware(tracer_provider=spying)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill", max_attempts=1)
    async def bill(order: Order) -> None:
        if order.id == 2:
            raise ValueError("no")

    async with app.test() as t:
        await t.publish("orders", Order(1))
        await t.publish("orders", Order(2))  # a failure: nothing to record it on
    assert len(processed(spying.started)) == 2
    assert [call for call in spying.calls if call != "end"] == []
    assert spying.calls.count("end") >= 2  # ended all the same


async def test_a_span_that_does_not_record_still_passes_the_trace_context_on() -> None:
    spying = SpyingProvider(trace.NoOpTracerProvider())
    app = App("shop", middlewares=[TracingMiddleware(tracer_provider=spying)])
    broker = app.broker(MemoryBroker())
    seen: list[str] = []

    @broker.subscriber(MemoryStream("orders"), name="bill")
    @broker.publisher("receipts")
    async def bill(order: Order) -> int:
        return order.id

    @broker.subscriber(MemoryStream("receipts"), name="note")
    async def note(n: int, ctx: Context) -> None:
        seen.append(ctx.headers.get("traceparent", ""))

    async with app.test() as t:
        await t.publish("orders", Order(5), headers={"traceparent": TRACEPARENT})
    [traceparent] = seen
    assert traceparent.split("-")[1] == TRACEPARENT.split("-")[1]  # the same trace, on and on
    assert [c for c in spying.calls if c != "end"] == []


async def test_a_delivery_without_headers_is_processed_in_a_root_context() -> None:
    """Nothing to extract from no headers: the span is a root, as an extraction from an empty
    carrier makes it, whatever span is current where the app runs."""
    spying, exporter = recorded()
    tracer = TracerProvider().get_tracer("test")
    app = App("shop", middlewares=[TracingMiddleware(tracer_provider=spying)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), name="bill")
    async def bill(order: Order) -> None: ...

    with tracer.start_as_current_span("outside"):  # not the parent of what the app processes
        async with app.test() as t:
            # Past the publish hook, which would add a trace context to the headers.
            await broker.transport.publish("orders", b'{"id": 1}', {})
            await t.settled()
    [span] = [s for s in exporter.get_finished_spans() if s.name == "process orders"]
    assert span.parent is None
    assert dict(span.attributes or {})["trio_streams.outcome"] == "ack"


# ---- in line inside the hooks ---------------------------------------------------------------


class Noting(Middleware):
    """Notes each call record as it is when its hook is left, and when it was decided."""

    def __init__(self) -> None:
        self.left: list[tuple[Any, ...]] = []
        self.decided: list[str] = []

    @asynccontextmanager
    async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
        call.on_decided.append(lambda c: self.decided.append(repr(c.message)))
        yield
        verdict = call.verdict
        self.left.append((
            call.delivery.stream, call.message, call.called, call.settled,
            None if call.outcome is None else call.outcome.kind.value,
            None if verdict is None else (verdict.outcome.kind.value, verdict.dead_letter),
            type(call.error).__name__,
        ))  # fmt: skip


async def test_a_payload_only_handler_under_a_hook_leaves_the_record_the_general_way_leaves() -> (
    None
):
    """The same deliveries, to a handler that takes the payload alone (in line inside the
    hook) and to one that also takes its context (the general way): the same records."""
    inline, general = Noting(), Noting()
    app = App("shop")
    broker = app.broker(MemoryBroker())

    def behave(order: Order) -> Any:
        if order.id == 1:
            raise ValueError("no")
        if order.id == 2:
            return retry()
        if order.id == 3:
            return order.id * 10  # published
        return None

    @broker.subscriber(
        MemoryStream("orders"), name="alone", middlewares=[inline], max_attempts=2,
        dead_letter="dlq",
    )  # fmt: skip
    @broker.publisher("out-alone")
    async def alone(order: Order) -> Any:
        return behave(order)

    @broker.subscriber(
        MemoryStream("orders"), name="with_ctx", middlewares=[general], max_attempts=2,
        dead_letter="dlq",
    )  # fmt: skip
    @broker.publisher("out-ctx")
    async def with_ctx(order: Order, ctx: Context) -> Any:
        return behave(order)

    async with app.test() as t:
        for n in range(5):
            await t.publish("orders", Order(n))
        await t.publish("orders", b"not json")
    assert sorted(inline.left, key=repr) == sorted(general.left, key=repr)
    assert sorted(inline.decided) == sorted(general.decided)
    decided = [row for row in inline.left if row[5] is not None]
    assert len(decided) == 8  # 0, 1 twice, 2 twice, 3, 4, the undecodable one
    assert all(row[3] for row in decided)  # every one settled
    # And the other's two retry copies, passed over unhandled.
    assert len(inline.left) == 10
