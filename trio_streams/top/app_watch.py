"""``top http://HOST:PORT``: a running app's own view of its subscriptions, from ``--http``.

Each refresh reads ``/metrics`` (the :class:`~trio_streams.prometheus.PrometheusMiddleware`
metrics, parsed with ``prometheus-client``) and ``/readyz`` (the app's health), and shows per
subscription: received/s and handled/s (rates over the time since the previous refresh),
handled by outcome, retries, dead letters, in flight, channel depth, lag, faults and whether it
is degraded. An app run with ``--workers`` shows a line for the app (its totals) and, under
it, one per worker (``[w0]``, ``[w1]``...), from the series the supervisor labels ``worker``.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass, field
from typing import final

import trio

from ..core.errors import TrioStreamsError
from ..core.extras import importing
from ..running.http_get import NotHttp, get_over
from .render import Table
from .view import Screen, Watch

__all__ = ["AppWatch", "EndpointError", "MetricsMissing", "fetch"]

_TIMEOUT = 10.0
_OUTCOMES = ("ack", "drop", "retry", "retry_after", "dead_letter")

#: What a missing prometheus-client refuses: reading an app's /metrics.
APP_METRICS = "top of an app's /metrics (trio-streams run --http)"


class EndpointError(TrioStreamsError):
    """The app's HTTP endpoint could not be read (down, or not a trio-streams app)."""


class MetricsMissing(EndpointError):
    """The app answers, but its ``/metrics`` has none of trio-streams' metrics: it runs no
    :class:`~trio_streams.prometheus.PrometheusMiddleware`, so there is nothing to show."""

    def hint(self) -> str | None:
        return (
            "add the metrics to the app: App(name, middlewares=[PrometheusMiddleware()]) "
            "with from trio_streams.prometheus import PrometheusMiddleware"
        )


async def fetch(url: str, path: str) -> tuple[int, bytes]:
    """``GET url+path`` (plain HTTP/1.1, ``Connection: close``): status and body."""
    address = url.removeprefix("http://").rstrip("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise EndpointError(f"expected http://HOST:PORT, got {url!r}")
    try:
        with trio.fail_after(_TIMEOUT):
            stream = await trio.open_tcp_stream(host.strip("[]"), int(port))
            return await get_over(stream, address, path)
    except (OSError, trio.TooSlowError) as exc:
        raise EndpointError(f"cannot read {url}{path}: {exc or type(exc).__name__}") from exc
    except NotHttp:
        raise EndpointError(f"{url}{path} did not answer HTTP") from None


#: A row: the subscription, and the worker ("" for the whole app).
_Row = tuple[str, str]
#: The supervisor's own families: they say nothing of the app's subscriptions.
_SUPERVISION = ("trio_streams_workers", "trio_streams_worker_up", "trio_streams_worker_restarts")


@final
@dataclass(slots=True)
class _Sample:
    at: float
    counters: dict[_Row, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    gauges: dict[_Row, dict[str, float]] = field(default_factory=lambda: defaultdict(dict))
    #: The worker processes of a supervised app (``--workers``), 0 for one process.
    workers: int = 0


def _parse(text: str, at: float) -> _Sample | None:
    """The trio-streams metrics of ``text``, per subscription and worker; None when it has no
    trio-streams metric at all (a family declared without samples counts: the middleware
    runs, nothing happened yet)."""
    with importing("prometheus", APP_METRICS):
        from prometheus_client.parser import text_string_to_metric_families

    sample = _Sample(at)
    ours = False
    for family in text_string_to_metric_families(text):
        if family.name in _SUPERVISION:
            if family.name == "trio_streams_workers" and family.samples:
                sample.workers = int(family.samples[0].value)
            continue
        ours = ours or family.name.startswith("trio_streams_")
        for item in family.samples:
            subscription = item.labels.get("subscription")
            if subscription is None or not item.name.startswith("trio_streams_"):
                continue
            name = item.name.removeprefix("trio_streams_")
            if name == "handled_total":
                name = f"handled:{item.labels.get('outcome')}"
            target = sample.counters if name.endswith("_total") or ":" in name else sample.gauges
            target[subscription, item.labels.get("worker", "")][name] = item.value
    return sample if ours else None


def _label(row: _Row) -> str:
    subscription, worker = row
    return f"  {subscription} [w{worker}]" if worker else subscription


class AppWatch(Watch):
    """A running app's subscriptions, read over its ``--http`` endpoint."""

    def __init__(self, url: str) -> None:
        self._url = url.rstrip("/")
        self._previous: _Sample | None = None
        self._latest: _Sample | None = None
        self._health = "?"

    async def refresh(self) -> None:
        status, body = await fetch(self._url, "/metrics")
        if status != 200:
            raise EndpointError(f"{self._url}/metrics answered {status}: {body[:200]!r}")
        try:
            sample = _parse(body.decode(), trio.current_time())
        except ValueError as exc:
            raise EndpointError(f"{self._url}/metrics is not Prometheus text: {exc}") from exc
        if sample is None:
            raise MetricsMissing(
                f"{self._url}/metrics has no trio-streams metrics: the app runs no "
                "PrometheusMiddleware, so its subscriptions cannot be shown"
            )
        ready, health = await fetch(self._url, "/readyz")
        try:
            state = json.loads(health)
            self._health = state["state"] + (f" ({state['reason']})" if state.get("reason") else "")
        except (ValueError, KeyError, TypeError):
            self._health = f"/readyz answered {ready}"
        self._previous, self._latest = self._latest, sample

    def screen(self, *, sort: str, match: str) -> Screen:
        latest = self._latest
        assert latest is not None, "refresh() first"
        previous = self._previous
        seconds = None if previous is None else latest.at - previous.at

        def rate(row: _Row, name: str) -> str:
            if previous is None or not seconds:
                return "-"
            now = latest.counters[row].get(name, 0.0)
            before = previous.counters.get(row, {}).get(name, 0.0)
            return f"{(now - before) / seconds:.1f}"

        def order(row: _Row) -> tuple[float, str, int]:
            subscription, worker = row
            first = 0.0
            if sort == "rate" and previous is not None:  # a worker's row stays under the app's
                first = -float(rate((subscription, ""), "received_total").replace("-", "0"))
            return first, subscription, int(worker or -1)

        found = sorted(set(latest.counters) | set(latest.gauges), key=order)
        if match:
            found = [row for row in found if match in row[0]]
        header = [
            "SUBSCRIPTION", "RECEIVED/S", "HANDLED/S", *(o.upper() for o in _OUTCOMES),
            "RETRIES", "IN-FLIGHT", "QUEUED", "LAG", "FAULTS", "DEGRADED",
        ]  # fmt: skip
        rows = []
        for row in found:
            counters, gauges = latest.counters[row], latest.gauges[row]
            handled = sum(counters.get(f"handled:{o}", 0.0) for o in _OUTCOMES)
            handled_before = (
                sum(previous.counters.get(row, {}).get(f"handled:{o}", 0.0) for o in _OUTCOMES)
                if previous is not None
                else None
            )
            handled_rate = (
                "-"
                if handled_before is None or not seconds
                else f"{(handled - handled_before) / seconds:.1f}"
            )
            rows.append(
                [
                    _label(row),
                    rate(row, "received_total"),
                    handled_rate,
                    *(f"{counters.get(f'handled:{o}', 0.0):.0f}" for o in _OUTCOMES),
                    f"{counters.get('retries_total', 0.0):.0f}",
                    f"{gauges.get('in_flight', 0.0):.0f}",
                    f"{gauges.get('channel_depth', 0.0):.0f}",
                    f"{gauges.get('lag_messages', 0.0):.0f}",
                    f"{counters.get('faults_total', 0.0):.0f}",
                    "yes" if gauges.get("degraded") else "no",
                ]
            )
        table: Table = (header, rows)
        over = "" if seconds is None else f", rates over {seconds:.2f} s"
        subscriptions = len({subscription for subscription, _ in found})
        workers = f"{latest.workers} workers, " if latest.workers else ""
        title = f"{self._url}: {self._health}, {workers}{subscriptions} subscriptions{over}"
        return Screen(title, [("subscriptions", table)])
