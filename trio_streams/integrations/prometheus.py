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
  ``trio_streams_publish_duration_seconds{broker,destination}``; a handler's reply to a request
  is counted with ``destination="(reply)"`` (its real destination is the caller's reply
  address, one per caller: as a label it would make a series per caller).

Request-reply (``broker.request``, through the ``request`` hook; by broker and destination):

- ``trio_streams_requests_total{broker,destination}`` — requests made;
- ``trio_streams_request_outcomes_total{broker,destination,outcome}`` — what each came to:
  ``ok`` (a value replied), ``remote_error`` (the handler's failure replied), ``timeout``,
  ``no_responders``, ``lost`` (the reply's subscription was lost meanwhile), ``error`` (its
  publish failed), ``cancelled`` (by its caller);
- ``trio_streams_request_duration_seconds{broker,destination}`` — round trip, from before the
  publish to the reply, of the requests answered (``ok`` and ``remote_error``);
- ``trio_streams_requests_in_flight{broker}`` — requests waiting for their reply now;
- ``trio_streams_late_replies_total{broker}`` — replies that came after their request stopped
  waiting (timed out, cancelled), dropped; read at each scrape from the broker's reply inbox
  (``Broker.reply_inbox``), and carried over when the broker opens a new one;
- ``trio_streams_replies_sent_total{broker,outcome}`` — the handler side: replies sent,
  ``value`` (what the handler returned) or ``error`` (its failure).

Read at each scrape from the running app (:class:`SubscriptionStats`):

- ``trio_streams_in_flight{subscription}`` — read and not yet settled;
- ``trio_streams_channel_depth{subscription}`` — waiting in the bounded delivery channel;
- ``trio_streams_lag_messages{subscription}`` — a Redis group's lag (entries it has not read),
  or what the transport could hand out now without waiting, where it can tell;
- ``trio_streams_lag_bytes{subscription}`` — bytes of a stream file not read yet;
- ``trio_streams_delayed{subscription}`` — retries waiting out ``retry_after`` in process;
- ``trio_streams_faults_total{subscription}`` and ``trio_streams_degraded{subscription}``;
- ``trio_streams_deleted_while_pending_total{subscription}`` — messages deleted at the server
  while pending, so never handled (Redis stream entries ``XDEL``ed or trimmed in a pending
  list);
- ``trio_streams_up`` — 1 while the app is running (degraded or not).

Cost: a plain ack (the commonest verdict) is two additions and a bucket's search, into counters
bound to its subscription once (the ``ack_counter`` hook), and every other verdict a handful of
additions through the ``observe`` hook: plain numbers, exported at each scrape, which keep the
common path in line. ``benchmarks/observability_cost.py`` measures it against the same handler
without metrics.
"""

from __future__ import annotations

import threading
import time
from bisect import bisect_left
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import trio

from ..core.codec import DecodeError
from ..core.errors import ConfigurationError
from ..core.extras import importing
from ..core.middleware import Middleware, PublishCall, RequestCall
from ..core.outcome import OutcomeKind

with importing("prometheus", "trio_streams.prometheus"):
    from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )
    from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from ..core.app import App
    from ..core.broker import Broker
    from ..core.dispatch import HandledMessage
    from ..core.requests import ReplyInbox

__all__ = ["PrometheusMiddleware"]

#: The ``destination`` label of a reply's publish (see the module docstring).
_REPLY_DESTINATION: Final = "(reply)"
#: The request outcomes a round trip is observed for: a reply came.
_ANSWERED = frozenset({"ok", "remote_error"})

_ACK: Final = OutcomeKind.ACK
_DROP: Final = OutcomeKind.DROP
_RETRY: Final = OutcomeKind.RETRY


class _Counts:
    """What one subscription's deliveries came to, in plain numbers, exported at each scrape.

    Made once per subscription, at its first delivery, and looked up by its name: counting a
    delivery is one addition to the counter of its outcome and one to a histogram bucket, no
    lock, no label lookup, no string or dict built. What the other families say follows from
    these at the scrape: ``received`` is the sum of the outcomes (each delivery observed is
    counted under exactly one), ``retries`` that of ``retry`` and ``retry_after``,
    ``dead_letters`` is ``dead_letter``."""

    __slots__ = ("ack", "buckets", "dead_letter", "decode_failures", "drop", "retry",
                 "retry_after", "seconds")  # fmt: skip

    def __init__(self, bounds: int) -> None:
        self.ack = 0
        self.drop = 0
        self.retry = 0
        self.retry_after = 0
        self.dead_letter = 0
        self.decode_failures = 0
        #: Observations per histogram bucket (the last: above every bound) and their sum (the
        #: count is the buckets' total).
        self.buckets = [0] * (bounds + 1)
        self.seconds = 0.0

    def handled(self) -> dict[str, int]:
        """The deliveries by outcome (the ``outcome`` label's values)."""
        return {
            "ack": self.ack, "drop": self.drop, "retry": self.retry,
            "retry_after": self.retry_after, "dead_letter": self.dead_letter,
        }  # fmt: skip


#: A destination's publish series: published, publish errors, publish duration.
_PublishSeries = tuple[Counter, Counter, Histogram]


class PrometheusMiddleware(Middleware):
    """Records the metrics of the module docstring into ``registry`` (the default one of
    ``prometheus-client`` unless given); ``namespace`` prefixes every name
    (``trio_streams``); ``buckets`` are the duration histograms' upper bounds (seconds)."""

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = None,
        namespace: str = "trio_streams",
        buckets: tuple[float, ...] = Histogram.DEFAULT_BUCKETS,
    ) -> None:
        self.registry = REGISTRY if registry is None else registry
        self._apps: list[App] = []
        #: The late replies of the brokers whose requests this middleware saw (by identity).
        self._late = _LateReplies()
        self._bounds = sorted(b for b in buckets if b != float("inf"))
        self._counts: dict[str, _Counts] = {}
        #: The label children of each (broker, destination) published to, bound once.
        self._publish_series: dict[tuple[str, str], _PublishSeries] = {}
        ns = namespace
        where = ["broker", "destination"]
        try:
            self._register(ns, where, buckets)
        except ValueError as exc:  # prometheus-client: a name already in the registry
            raise ConfigurationError(
                f"PrometheusMiddleware: the registry already holds {ns}_* metrics ({exc}); give "
                "each app its own registry= (prometheus_client.CollectorRegistry()), or share "
                "one PrometheusMiddleware between them"
            ) from None

    def _register(self, ns: str, where: list[str], buckets: tuple[float, ...]) -> None:
        collector = _StatsCollector(self, ns)
        self.registry.register(collector)  # first: its names clash before any counter's
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
        self._requests = Counter(
            "requests", "Requests made.", where, namespace=ns, registry=self.registry
        )
        self._request_outcomes = Counter(
            "request_outcomes", "Requests, by what they came to.", [*where, "outcome"],
            namespace=ns, registry=self.registry,
        )  # fmt: skip
        self._request_duration = Histogram(
            "request_duration_seconds", "Round trip of a request that was answered.", where,
            namespace=ns, registry=self.registry, buckets=buckets,
        )  # fmt: skip
        self._requests_in_flight = Gauge(
            "requests_in_flight", "Requests waiting for their reply.", ["broker"], namespace=ns,
            registry=self.registry,
        )  # fmt: skip
        self._replies_sent = Counter(
            "replies_sent", "Replies sent to requests, by what they carry.", ["broker", "outcome"],
            namespace=ns, registry=self.registry,
        )  # fmt: skip

    def attach(self, app: App) -> None:
        """Read ``app``'s subscriptions at each scrape (called by ``App(middlewares=...)``)."""
        if app not in self._apps:
            self._apps.append(app)

    def _counts_of(self, subscription: str) -> _Counts:
        counts = self._counts.get(subscription)
        if counts is None:
            counts = self._counts[subscription] = _Counts(len(self._bounds))
        return counts

    def ack_counter(self, subscription: str) -> Callable[[float | None], None]:
        """Counts a plain ack of ``subscription`` into its counters, bound here once: the
        common verdict costs two additions and a bucket's search, no record, no lookup."""
        counts = self._counts_of(subscription)
        bounds = self._bounds
        buckets = counts.buckets
        bucket = bisect_left

        def acked(seconds: float | None) -> None:
            counts.ack += 1
            if seconds is not None:
                buckets[bucket(bounds, seconds)] += 1
                counts.seconds += seconds

        return acked

    def observe(self, handled: HandledMessage) -> None:
        counts = self._counts.get(handled.subscription)
        if counts is None:
            counts = self._counts_of(handled.subscription)
        verdict = handled.verdict
        if verdict.dead_letter is not None:
            counts.dead_letter += 1
        else:  # compared by identity: an enum's hash is a Python call
            kind = verdict.outcome.kind
            if kind is _ACK:
                counts.ack += 1
            elif kind is _RETRY:
                counts.retry += 1
            elif kind is _DROP:
                counts.drop += 1
            else:
                counts.retry_after += 1
        if not handled.called and isinstance(handled.error, DecodeError):
            counts.decode_failures += 1
        seconds = handled.seconds
        if seconds is not None:
            counts.buckets[bisect_left(self._bounds, seconds)] += 1
            counts.seconds += seconds

    def _publishing(self, broker: str, destination: str) -> _PublishSeries:
        """The publish series of ``(broker, destination)``, their label children bound once
        (``labels()`` takes a lock and a lookup) and then kept: destinations come from the
        code, a reply's is one label for all."""
        key = (broker, destination)
        series = self._publish_series.get(key)
        if series is None:
            series = self._publish_series[key] = (
                self._published.labels(broker, destination),
                self._publish_errors.labels(broker, destination),
                self._publish_duration.labels(broker, destination),
            )
        return series

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        reply = call.is_reply
        published, errors, duration = self._publishing(
            call.broker, _REPLY_DESTINATION if reply else call.destination.name
        )
        started = time.perf_counter()
        try:
            yield
        except trio.Cancelled:
            raise  # a publish given up by a stop is not an error of the publish
        except BaseException:
            errors.inc()
            raise
        else:
            published.inc()
            if reply:
                outcome = "error" if call.is_error_reply else "value"
                self._replies_sent.labels(call.broker, outcome).inc()
        finally:
            duration.observe(time.perf_counter() - started)

    @asynccontextmanager
    async def request(self, call: RequestCall) -> AsyncIterator[None]:
        labels = (call.broker, call.destination.name)
        self._requests.labels(*labels).inc()
        in_flight = self._requests_in_flight.labels(call.broker)
        in_flight.inc()
        started = time.perf_counter()
        try:
            yield
        finally:
            in_flight.dec()
            self._late.note(call.requester)  # the inbox it used, while it is the broker's
            outcome = call.outcome or "error"  # None: a middleware inside it raised
            self._request_outcomes.labels(*labels, outcome).inc()
            if outcome in _ANSWERED:
                self._request_duration.labels(*labels).observe(time.perf_counter() - started)


class _LateReplies:
    """The replies each broker dropped as late, carried across its reply inboxes: a broker
    counts per inbox (``ReplyInbox.late``), and opens a new one when it reconnects or its inbox
    failed. Each inbox a request used is held until it is replaced, so its final count is
    carried over exactly. Noted from the request hook and read at each scrape, which may run
    in another thread (``prometheus_client.start_http_server``): a lock keeps a count from
    being carried twice."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: Per broker: the broker, the inbox last seen, what its earlier inboxes dropped.
        self._brokers: dict[int, tuple[Broker, ReplyInbox | None, int]] = {}

    def note(self, broker: Broker) -> None:
        """Take in ``broker``'s inbox as it is now."""
        with self._lock:
            self._note(broker)

    def _note(self, broker: Broker) -> None:
        _, held, carried = self._brokers.get(id(broker), (broker, None, 0))
        inbox = broker.reply_inbox
        if inbox is not held:
            carried += 0 if held is None else held.late
            held = inbox
        self._brokers[id(broker)] = (broker, held, carried)

    def totals(self) -> dict[str, int]:
        """What each broker name's brokers have dropped so far."""
        totals: dict[str, int] = {}
        with self._lock:
            for broker, _, _ in list(self._brokers.values()):
                self._note(broker)
            for broker, held, carried in self._brokers.values():
                dropped = carried + (0 if held is None else held.late)
                totals[broker.name] = totals.get(broker.name, 0) + dropped
        return totals


class _StatsCollector(Collector):
    """The counted deliveries, and the gauges read from the running apps, at each scrape."""

    def __init__(self, metrics: PrometheusMiddleware, namespace: str) -> None:
        self._metrics = metrics
        self._ns = namespace

    def _late_replies(self, ns: str) -> Any:
        """``late_replies_total`` by broker name."""
        late = CounterMetricFamily(
            f"{ns}_late_replies",
            "Replies that came after their request stopped waiting, dropped.",
            labels=["broker"],
        )
        for name, value in sorted(self._metrics._late.totals().items()):
            late.add_metric([name], value)
        return late

    def _counted(self, ns: str) -> Iterator[Any]:
        sub = ["subscription"]
        received = CounterMetricFamily(f"{ns}_received", "Deliveries handled.", labels=sub)
        handled = CounterMetricFamily(
            f"{ns}_handled", "Deliveries handled, by outcome.", labels=[*sub, "outcome"]
        )
        retries = CounterMetricFamily(f"{ns}_retries", "Retries.", labels=sub)
        dead = CounterMetricFamily(f"{ns}_dead_letters", "Deliveries dead-lettered.", labels=sub)
        undecodable = CounterMetricFamily(
            f"{ns}_decode_failures", "Payloads that could not be decoded.", labels=sub
        )
        duration = HistogramMetricFamily(
            f"{ns}_handler_duration_seconds",
            "From the start of the handling (decoding included) to the verdict.",
            labels=sub,
        )
        bounds = self._metrics._bounds
        for name, counts in sorted(self._metrics._counts.items()):
            by_outcome = counts.handled()
            received.add_metric([name], sum(by_outcome.values()))
            for outcome, value in by_outcome.items():
                handled.add_metric([name, outcome], value)
            retries.add_metric([name], counts.retry + counts.retry_after)
            dead.add_metric([name], counts.dead_letter)
            undecodable.add_metric([name], counts.decode_failures)
            cumulative, total = [], 0
            for bound, value in zip([*map(str, bounds), "+Inf"], counts.buckets, strict=True):
                total += value
                cumulative.append((bound, total))
            duration.add_metric([name], cumulative, counts.seconds)
        yield from (received, handled, retries, dead, undecodable, duration)

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
        deleted = CounterMetricFamily(
            f"{ns}_deleted_while_pending",
            "Messages deleted at the server while pending, so never handled.",
            labels=["subscription"],
        )
        up = GaugeMetricFamily(f"{ns}_up", "1 while the app runs (degraded or not).")
        lag_bytes = GaugeMetricFamily(
            f"{ns}_lag_bytes", "Bytes of a stream file not read yet.", labels=["subscription"]
        )
        yield from self._counted(ns)
        yield self._late_replies(ns)
        running_any = False
        for app in self._metrics._apps:
            running = app.running
            if running is None:
                continue
            running_any = running_any or app.health.value.ok
            for name, stats in running.stats().items():
                lag = stats.lag
                for key, family in families.items():
                    value = getattr(stats, gauges[key][1])
                    if key == "lag_messages" and lag is not None and lag[0] == "messages":
                        value = lag[1]  # the transport's own figure (a group's lag)
                    family.add_metric([name], value)
                if lag is not None and lag[0] == "bytes":
                    lag_bytes.add_metric([name], lag[1])
                faults.add_metric([name], stats.faults)
                degraded.add_metric([name], 1 if stats.degraded else 0)
                deleted.add_metric([name], stats.deleted_while_pending)
        up.add_metric([], 1 if running_any else 0)
        yield from families.values()
        yield faults
        yield degraded
        yield deleted
        yield lag_bytes
        yield up
