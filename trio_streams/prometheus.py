"""Prometheus metrics of an app: a middleware, and a collector of its subscriptions' state.

``App("billing", middlewares=[PrometheusMiddleware()])`` records, with ``prometheus-client``
(the ``prometheus`` extra), into its default registry or the one given:

Counters and the histogram, by subscription (the label sets stay bounded: names come from the
code, outcomes from a fixed set):

- ``trio_streams_received_total{subscription}`` — deliveries handed to the handling;
- ``trio_streams_handled_total{subscription,outcome}`` — by what became of each: ``ack``,
  ``drop``, ``retry``, ``retry_after``, ``dead_letter``;
- ``trio_streams_retries_total{subscription}``, ``trio_streams_dead_letters_total{subscription}``,
  ``trio_streams_decode_failures_total{subscription}``;
- ``trio_streams_handler_duration_seconds{subscription}`` — from before decoding to after the
  settle;
- ``trio_streams_published_total{broker,destination}``,
  ``trio_streams_publish_errors_total{broker,destination}``,
  ``trio_streams_publish_duration_seconds{broker,destination}``.

Read at each scrape from the running app (:class:`SubscriptionStats`):

- ``trio_streams_in_flight{subscription}`` — read and not yet settled;
- ``trio_streams_channel_depth{subscription}`` — waiting in the bounded delivery channel;
- ``trio_streams_lag_messages{subscription}`` — what the transport could hand out now without
  waiting, where it can tell (a stream file's messages behind the tail, a group's backlog);
- ``trio_streams_delayed{subscription}`` — retries waiting out ``retry_after`` in process;
- ``trio_streams_faults_total{subscription}`` and ``trio_streams_degraded{subscription}``;
- ``trio_streams_up`` — 1 while the app is running (degraded or not).

Cost: one counter increment and one histogram observation per delivery, with the label
children bound once per subscription (``benchmarks/inprocess_dispatch.py --middlewares``
measures it).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from .middleware import HandlerCall, Middleware, PublishCall
from .outcome import OutcomeKind

if TYPE_CHECKING:
    from .app import App

__all__ = ["PrometheusMiddleware"]

_OUTCOMES = {
    OutcomeKind.ACK: "ack",
    OutcomeKind.DROP: "drop",
    OutcomeKind.RETRY: "retry",
    OutcomeKind.RETRY_AFTER: "retry_after",
}


class _Subscription:
    """The label children of one subscription, bound once."""

    __slots__ = ("dead_letters", "decode_failures", "duration", "handled", "received", "retries")

    def __init__(self, metrics: PrometheusMiddleware, name: str) -> None:
        self.received = metrics._received.labels(name)
        self.handled = {
            outcome: metrics._handled.labels(name, outcome)
            for outcome in (*_OUTCOMES.values(), "dead_letter")
        }
        self.retries = metrics._retries.labels(name)
        self.dead_letters = metrics._dead_letters.labels(name)
        self.decode_failures = metrics._decode_failures.labels(name)
        self.duration = metrics._duration.labels(name)


class PrometheusMiddleware(Middleware):
    """Records the metrics of the module docstring into ``registry`` (the default one of
    ``prometheus-client`` unless given); ``namespace`` prefixes every name
    (``trio_streams``)."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "trio_streams",
        buckets: tuple[float, ...] = Histogram.DEFAULT_BUCKETS,
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        self._apps: list[App] = []
        ns = namespace
        sub = ["subscription"]
        self._received = Counter(
            "received", "Deliveries handed to the handling.", sub, namespace=ns,
            registry=self.registry,
        )  # fmt: skip
        self._handled = Counter(
            "handled", "Deliveries handled, by outcome.", [*sub, "outcome"], namespace=ns,
            registry=self.registry,
        )  # fmt: skip
        self._retries = Counter(
            "retries", "Retries (retry and retry_after).", sub, namespace=ns,
            registry=self.registry,
        )  # fmt: skip
        self._dead_letters = Counter(
            "dead_letters", "Deliveries dead-lettered.", sub, namespace=ns, registry=self.registry
        )
        self._decode_failures = Counter(
            "decode_failures", "Payloads that could not be decoded.", sub, namespace=ns,
            registry=self.registry,
        )  # fmt: skip
        self._duration = Histogram(
            "handler_duration_seconds", "From before decoding to after the settle.", sub,
            namespace=ns, registry=self.registry, buckets=buckets,
        )  # fmt: skip
        where = ["broker", "destination"]
        self._published = Counter(
            "published", "Messages published.", where, namespace=ns, registry=self.registry
        )
        self._publish_errors = Counter(
            "publish_errors", "Publishes that failed.", where, namespace=ns,
            registry=self.registry,
        )  # fmt: skip
        self._publish_duration = Histogram(
            "publish_duration_seconds", "How long a publish took.", where, namespace=ns,
            registry=self.registry, buckets=buckets,
        )  # fmt: skip
        self._subscriptions: dict[str, _Subscription] = {}
        self.registry.register(_StatsCollector(self, ns))

    def attach(self, app: App) -> None:
        """Read ``app``'s subscriptions at each scrape (called by ``App(middlewares=...)``)."""
        if app not in self._apps:
            self._apps.append(app)

    def _for(self, name: str) -> _Subscription:
        found = self._subscriptions.get(name)
        if found is None:
            found = self._subscriptions[name] = _Subscription(self, name)
        return found

    @asynccontextmanager
    async def handle(self, call: HandlerCall) -> AsyncIterator[None]:
        metrics = self._for(call.subscription)
        metrics.received.inc()
        started = time.perf_counter()
        try:
            yield
        finally:
            metrics.duration.observe(time.perf_counter() - started)
            verdict = call.verdict
            if verdict is not None:
                if verdict.dead_letter is not None:
                    metrics.handled["dead_letter"].inc()
                    metrics.dead_letters.inc()
                else:
                    kind = verdict.outcome.kind
                    metrics.handled[_OUTCOMES[kind]].inc()
                    if kind is OutcomeKind.RETRY or kind is OutcomeKind.RETRY_AFTER:
                        metrics.retries.inc()
                if not call.called and call.message is None and call.error is not None:
                    metrics.decode_failures.inc()

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        labels = (call.broker, call.destination.name)
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            self._publish_errors.labels(*labels).inc()
            raise
        else:
            self._published.labels(*labels).inc()
        finally:
            self._publish_duration.labels(*labels).observe(time.perf_counter() - started)


class _StatsCollector(Collector):
    """The gauges read from the running apps at each scrape."""

    def __init__(self, metrics: PrometheusMiddleware, namespace: str) -> None:
        self._metrics = metrics
        self._ns = namespace

    def collect(self) -> Iterator[Any]:
        ns = self._ns
        gauges = {
            "in_flight": ("Read and not yet settled.", "outstanding"),
            "channel_depth": ("Waiting in the bounded delivery channel.", "queued"),
            "lag_messages": ("What the transport could hand out now, where it can tell.", "unread"),
            "delayed": ("Retries waiting out retry_after in this process.", "delayed"),
        }
        families = {
            name: GaugeMetricFamily(f"{ns}_{name}", text, labels=["subscription"])
            for name, (text, _) in gauges.items()
        }
        faults = CounterMetricFamily(
            f"{ns}_faults", "Faults the transport recovered from.", labels=["subscription"]
        )
        degraded = GaugeMetricFamily(
            f"{ns}_degraded", "1 while a fault lasts.", labels=["subscription"]
        )
        up = GaugeMetricFamily(f"{ns}_up", "1 while the app runs (degraded or not).")
        running_any = False
        for app in self._metrics._apps:
            running = app.running
            if running is None:
                continue
            running_any = running_any or app.health.value.ok
            for name, stats in running.stats().items():
                for family, (_, attribute) in zip(families.values(), gauges.values(), strict=True):
                    family.add_metric([name], getattr(stats, attribute))
                faults.add_metric([name], stats.faults)
                degraded.add_metric([name], 1 if stats.degraded else 0)
        up.add_metric([], 1 if running_any else 0)
        yield from families.values()
        yield faults
        yield degraded
        yield up
