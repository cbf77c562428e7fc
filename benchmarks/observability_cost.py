"""What metrics and tracing cost a no-op JSON handler: throughput with each, against without.

An in-process app (``MemoryBroker``, ``MemoryStream("bench").replay()``, one worker) replays
messages published before it starts to ``async def handle(order: Order) -> None`` (JSON into a
dataclass, nothing else), timed from ``serve`` to the app stopping by itself at the end of the
replay: the handling alone, no publishing in the timed part. The contenders, run twice each in
every round (in an order, then in the reverse order, the order turning round by round so none
always runs first; a round's figure is the two runs' rate together):

- ``bare`` — no middleware: the peer every other contender is divided by, in the same round;
- ``metrics`` — ``PrometheusMiddleware`` (a registry of its own);
- ``tracing-sdk`` — ``TracingMiddleware`` on the OpenTelemetry SDK: a ``TracerProvider``
  whose ``BatchSpanProcessor`` exports to an exporter that drops the spans (every span is
  recorded, ended and handed to the export thread, as in production, without the network);
- ``tracing-sdk-1%`` — the same SDK with ``ParentBased(TraceIdRatioBased(0.01))``: the
  spans not sampled are non-recording;
- ``tracing-no-sdk`` — ``TracingMiddleware`` on the OpenTelemetry API alone (no SDK
  configured: the global provider hands out no-op spans).

Prints each contender's ratio to ``bare`` per round, then the medians, and the aim for
metrics: a cost of 15% or less (a ratio of 0.85 or more) in EVERY round.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import trio

from trio_streams import App, MemoryBroker, MemoryStream, Middleware

#: The aim: with the metrics middleware, at least this share of the rate without it, every round.
AIM_METRICS_RATIO = 0.85
PAYLOAD = b'{"id":12345,"customer":"customer-0042","amount":99.5,"note":"' + b"n" * 30 + b'"}'


@dataclass
class Order:
    id: int
    customer: str
    amount: float
    note: str


def no_middleware() -> list[Middleware]:
    return []


def metrics() -> list[Middleware]:
    from prometheus_client import CollectorRegistry

    from trio_streams.prometheus import PrometheusMiddleware

    return [PrometheusMiddleware(registry=CollectorRegistry())]


#: The SDK providers made for the run under way, shut down (their export thread stopped) after it.
_providers: list[object] = []


def _sdk_provider(ratio: float | None) -> object:
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )
    from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased

    class Dropping(SpanExporter):
        """Takes every batch and keeps nothing: the export without the network."""

        def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    sampler = None if ratio is None else ParentBased(TraceIdRatioBased(ratio))
    provider = TracerProvider(sampler=sampler) if sampler is not None else TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Dropping()))
    _providers.append(provider)
    return provider


def tracing_sdk() -> list[Middleware]:
    from trio_streams.otel import TracingMiddleware

    return [TracingMiddleware(tracer_provider=_sdk_provider(None))]  # type: ignore[arg-type]


def tracing_sampled() -> list[Middleware]:
    from trio_streams.otel import TracingMiddleware

    return [TracingMiddleware(tracer_provider=_sdk_provider(0.01))]  # type: ignore[arg-type]


def tracing_api_only() -> list[Middleware]:
    from trio_streams.otel import TracingMiddleware

    return [TracingMiddleware()]  # the global provider: no SDK is configured in this process


#: Each contender's name (``--only`` takes these) and how to make its middlewares.
CONTENDERS: list[tuple[str, Callable[[], list[Middleware]]]] = [
    ("bare", no_middleware),
    ("metrics", metrics),
    ("tracing-sdk", tracing_sdk),
    ("tracing-sdk-1%", tracing_sampled),
    ("tracing-no-sdk", tracing_api_only),
]


def spans_alone(provider: object | None, n: int) -> float:
    """Seconds of CPU time per span the OpenTelemetry library itself takes for what the
    tracing middleware asks of it per delivery, with no framework around it: a ``CONSUMER``
    span started with the same attributes, its message id set, made current and no longer,
    its outcome set, ended. The part of a traced delivery's cost that is not the framework's."""
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import SpanKind
    from opentelemetry.util.types import AttributeValue

    tracer = trace.get_tracer("trio_streams", tracer_provider=provider)  # type: ignore[arg-type]
    attributes: dict[str, AttributeValue] = {
        "messaging.system": "trio_streams.memory",
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.destination.name": "bench",
        "messaging.message.delivery_count": 1,
        "trio_streams.subscription": "handle",
    }
    root = otel_context.Context()
    start = time.process_time()
    for number in range(n):
        span = tracer.start_span(
            "process bench", context=root, kind=SpanKind.CONSUMER, attributes=attributes
        )
        if span.is_recording():
            span.set_attribute("messaging.message.id", f"bench:{number}")
        token = otel_context.attach(trace.set_span_in_context(span))
        otel_context.detach(token)
        if span.is_recording():
            span.set_attribute("trio_streams.outcome", "ack")
        span.end()
    return (time.process_time() - start) / n


def replay(middlewares: list[Middleware], n: int) -> tuple[float, float]:
    """Messages per second through the app, ``n`` published then replayed to the handler: per
    second of the clock, and per second of the process's CPU time (every thread's: the SDK's
    export thread counts)."""
    app = App("bench", middlewares=middlewares)
    broker = app.broker(MemoryBroker(max_len=n + 1))
    handled = 0
    cpu: list[float] = []

    @broker.subscriber(MemoryStream("bench").replay())
    async def handle(order: Order) -> None:
        nonlocal handled
        handled += 1

    async def run() -> float:
        async with broker:  # the messages stay in the broker's hub for the app to replay
            for _ in range(n):
                await broker.transport.publish("bench", PAYLOAD, {})
        async with trio.open_nursery() as nursery:
            start, cpu_start = time.perf_counter(), time.process_time()
            running = await nursery.start(app.serve)
            await running.wait_stopped()
            cpu.append(time.process_time() - cpu_start)
            return time.perf_counter() - start

    elapsed = trio.run(run)
    if handled != n:
        raise SystemExit(f"the handler saw {handled} messages of {n}")
    while _providers:  # the SDK's export thread, stopped outside the timing
        _providers.pop().shutdown()  # type: ignore[attr-defined]
    return n / elapsed, n / cpu[0]


def report(what: str, rates: dict[str, list[float]]) -> list[float]:
    """The medians of ``rates`` (msgs/s by contender, one per round) and their ratios to bare
    of the same round; returns the per-round ratios of metrics (empty without it)."""
    bares = rates["bare"]
    print(f"\n{what}: bare (no middleware) {statistics.median(bares):,.0f} msgs/s, median")
    for name, values in list(rates.items())[1:]:
        ratios = [r / b for r, b in zip(values, bares, strict=True)]
        ratio = statistics.median(ratios)
        extra = statistics.median(1e6 / r - 1e6 / b for r, b in zip(values, bares, strict=True))
        print(
            f"  {name:<24} {statistics.median(values):>9,.0f} msgs/s  x{ratio:.3f} of bare "
            f"(cost {1 - ratio:.1%}, {extra:+.2f} us a message; rounds x{min(ratios):.3f}.."
            f"x{max(ratios):.3f})"
        )
    return [r / b for r, b in zip(rates.get("metrics", []), bares, strict=False)]


def report_framework_share(
    library: dict[str, list[float]], bares: list[float], cpu: dict[str, list[float]]
) -> None:
    """Each tracing contender's CPU time a message above bare, split into what the
    OpenTelemetry library alone takes for the same span (measured in the same round) and the
    rest: the framework's share."""
    if not library:
        return
    print(
        "\nthe framework's share of a traced delivery: its CPU time a message above bare, "
        "less what the OpenTelemetry library alone takes for the same span (medians):"
    )
    bare = statistics.median(1 / b for b in bares)
    for name, seconds in library.items():
        extra = [1 / r - 1 / b for r, b in zip(cpu[name], bares, strict=True)]
        own = statistics.median(seconds) * 1e6
        added = statistics.median(extra) * 1e6
        framework = statistics.median(e - o for e, o in zip(extra, seconds, strict=True)) * 1e6
        print(
            f"  {name:<16} {added:6.2f} us a message above bare: the library alone "
            f"{own:6.2f} us a span, the framework {framework:6.2f} us "
            f"({framework / (bare * 1e6):.0%} of a bare message, {bare * 1e6:.2f} us)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("-n", type=int, default=100_000, help="messages per run")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument(
        "--only", default="", help="the contenders to run besides bare, comma-separated names"
    )
    args = parser.parse_args()
    chosen = {"bare", *filter(None, (name.strip() for name in args.only.split(",")))}

    contenders = []
    for name, make in CONTENDERS:
        if args.only and name not in chosen:
            continue
        try:
            make()
        except ImportError:
            print(f"{name}: skipped (needs the prometheus and otel extras, opentelemetry-sdk)")
        else:
            contenders.append((name, make))
    while _providers:
        _providers.pop().shutdown()  # type: ignore[attr-defined]
    names = {name for name, _ in contenders}
    alone: dict[str, Callable[[], object | None]] = {}
    if "tracing-sdk" in names:
        alone["tracing-sdk"] = lambda: _sdk_provider(None)
    if "tracing-sdk-1%" in names:
        alone["tracing-sdk-1%"] = lambda: _sdk_provider(0.01)
    if "tracing-no-sdk" in names:
        alone["tracing-no-sdk"] = lambda: None
    #: Per tracing contender, the library's own CPU seconds a span, one figure per round.
    library: dict[str, list[float]] = {name: [] for name in alone}
    wall: dict[str, list[float]] = {name: [] for name, _ in contenders}
    cpu: dict[str, list[float]] = {name: [] for name, _ in contenders}
    print(f"{args.n:,} messages per run, {args.rounds} rounds; throughput ratio to bare of the "
          "same round (CPU-time ratio in brackets):")  # fmt: skip
    print("round" + "".join(f"{name:>22}" for name, _ in contenders[1:]) + "   bare msgs/s")
    for number in range(args.rounds):
        shift = number % len(contenders)
        order = contenders[shift:] + contenders[:shift]
        # Each contender twice, the order then the order reversed: a load that rises or
        # falls through the round weighs on every contender alike.
        runs: dict[str, list[tuple[float, float]]] = {name: [] for name, _ in contenders}
        for name, make in order + order[::-1]:
            runs[name].append(replay(make(), args.n))
        for name, both in runs.items():
            wall[name].append(len(both) / sum(1 / by_clock for by_clock, _ in both))
            cpu[name].append(len(both) / sum(1 / by_cpu for _, by_cpu in both))
        for name, provider in alone.items():
            library[name].append(spans_alone(provider(), args.n))
            while _providers:
                _providers.pop().shutdown()  # type: ignore[attr-defined]
        cells = "".join(
            f"{wall[name][-1] / wall['bare'][-1]:>13.3f} ({cpu[name][-1] / cpu['bare'][-1]:.3f})"
            for name, _ in contenders[1:]
        )
        print(f"{number + 1:>5}{cells}   {wall['bare'][-1]:>12,.0f}")

    metrics_rounds = report("throughput (messages per second of the clock)", wall)
    report("CPU time (messages per second of the process's CPU time, all threads)", cpu)
    report_framework_share(library, cpu["bare"], cpu)
    if metrics_rounds:
        worst = min(metrics_rounds)
        met = "met" if worst >= AIM_METRICS_RATIO else "NOT met"
        print(
            f"\naim: metrics cost <= {1 - AIM_METRICS_RATIO:.0%} of the throughput in every round "
            f"({met}: the worst round x{worst:.3f}, a cost of {1 - worst:.1%})"
        )
    print("(the machine may be shared: each ratio is to bare measured in the same round)")


if __name__ == "__main__":
    main()
