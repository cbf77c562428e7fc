"""The metrics of an app run in N workers: every worker's series, labelled, and the app's.

The supervisor of ``trio-streams run --workers N --http`` reads each worker's ``/metrics`` at
each scrape and hands the texts to :class:`AppFigures`, which answers one exposition:

- every series of every worker, with a ``worker`` label (``"0"`` to ``"N-1"``: the slot, which
  a restarted worker keeps);
- the app's series, without a ``worker`` label: counters, histograms and a summary's count and
  sum are the sum over the workers (exact: each is the sum of what every worker counted); a
  few gauges of trio-streams are combined as :data:`GAUGE_TOTALS` says; any other gauge has no
  app series (its meaning across processes is unknown: it stays per worker);
- ``trio_streams_workers`` (the slots), ``trio_streams_worker_up{worker}`` (1 when the worker
  answered this scrape) and ``trio_streams_worker_restarts_total{worker}``.

Counters never go backwards, across restarts too (Prometheus reads a drop as a reset): what a
slot's earlier processes counted, as last read, is carried into the slot's figures, and the
new process's counts are added to it. A slot that does not answer (being restarted) keeps its
counters at what was last read; its gauges are left out until it answers again. What a worker
counted after the last scrape before it died is not in the figures (a crash takes it away).

Pure bookkeeping: no I/O, nothing to cancel.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, final

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import Collector

__all__ = ["GAUGE_TOTALS", "AppFigures", "WorkerScrape"]

#: A series: its sample name and its labels (sorted pairs, without ``worker``).
_Key = tuple[str, tuple[tuple[str, str], ...]]

#: How the app's series of a trio-streams gauge is made from the workers' (by the end of the
#: metric's name, whatever the namespace): what is in flight, queued or delayed adds up; a lag
#: is the furthest behind (the workers of one group read the same lag); degraded when any
#: worker is; up only while every worker is.
GAUGE_TOTALS: dict[str, Callable[[Sequence[float]], float]] = {
    "_in_flight": sum,
    "_channel_depth": sum,
    "_delayed": sum,
    "_lag_messages": max,
    "_lag_bytes": max,
    "_degraded": max,
    "_up": min,
}

#: Samples of counter-like families that add up across workers and never go backwards.
_COUNTED = {
    "counter": ("_total",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("_count", "_sum"),
}


@final
@dataclass(frozen=True, slots=True)
class WorkerScrape:
    """What one slot answered at a scrape: ``text`` is None when it did not answer.
    ``generation`` tells the slot's processes apart (it changes at each restart)."""

    slot: int
    generation: int
    text: str | None
    restarts: int = 0


@dataclass(slots=True)
class _Slot:
    generation: int = -1
    #: What earlier processes of the slot counted, as last read.
    carried: dict[_Key, float] = field(default_factory=dict)
    #: What the current process counted, as last read (the highest read: counters only grow).
    counted: dict[_Key, float] = field(default_factory=dict)
    #: The gauges (and a summary's quantiles) it answered at the latest scrape.
    gauges: dict[_Key, float] = field(default_factory=dict)
    up: bool = False
    restarts: int = 0

    def read(self, scrape: WorkerScrape, families: dict[str, tuple[str, str]]) -> None:
        """Take a scrape in; a new generation carries the previous process's counts over."""
        if scrape.generation < self.generation:
            return  # answered by a process the slot has replaced since: already counted
        self.restarts = scrape.restarts
        if scrape.generation != self.generation:
            for key, value in self.counted.items():
                self.carried[key] = self.carried.get(key, 0.0) + value
            self.counted = {}
            self.generation = scrape.generation
        self.gauges = {}
        self.up = scrape.text is not None
        if scrape.text is None:
            return
        for family in text_string_to_metric_families(scrape.text):
            families.setdefault(family.name, (family.type, family.documentation))
            counted = _COUNTED.get(family.type, ())
            for sample in family.samples:
                if sample.name.endswith(("_created", "_gsum", "_gcount")):
                    continue  # a creation time has no meaning summed or carried over
                labels = tuple(sorted((k, v) for k, v in sample.labels.items() if k != "worker"))
                key = (sample.name, labels)
                if sample.name.removeprefix(family.name) in counted:
                    self.counted[key] = max(self.counted.get(key, 0.0), sample.value)
                else:
                    self.gauges[key] = sample.value

    def counters(self) -> dict[_Key, float]:
        totals = dict(self.carried)
        for key, value in self.counted.items():
            totals[key] = totals.get(key, 0.0) + value
        return totals


class AppFigures:
    """The running sums of an app's workers (one per supervisor, for its whole run)."""

    def __init__(self, slots: int) -> None:
        self._slots = [_Slot() for _ in range(slots)]
        #: Every family seen: its type and help, so a slot that stops answering keeps its
        #: counters in the exposition.
        self._families: dict[str, tuple[str, str]] = {}

    def read(self, scrapes: Iterable[WorkerScrape]) -> None:
        """Take in one scrape of (some of) the slots."""
        for scrape in scrapes:
            self._slots[scrape.slot].read(scrape, self._families)

    def exposition(self) -> bytes:
        """The Prometheus text of the app: the app's series, then each worker's."""
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Exposition(list(self._metrics())))
        return generate_latest(registry)

    def _metrics(self) -> Iterator[Metric]:
        per_slot = [(slot.counters(), slot.gauges) for slot in self._slots]
        by_family: dict[str, set[_Key]] = {name: set() for name in (*self._families, "")}
        for counters, gauges in per_slot:
            for key in (*counters, *gauges):
                by_family[_family_of(key[0], by_family)].add(key)
        for name, (kind, documentation) in sorted(self._families.items()):
            metric = Metric(name, documentation, kind)
            for key in sorted(by_family[name], key=_order):
                sample, labels = key
                values = [
                    counters[key] if key in counters else gauges.get(key)
                    for counters, gauges in per_slot
                ]
                total = _total(name, kind, sample, values)
                if total is not None:
                    metric.add_sample(sample, dict(labels), total)
                for index, value in enumerate(values):
                    if value is not None:
                        metric.add_sample(sample, {**dict(labels), "worker": str(index)}, value)
            yield metric
        yield from self._supervision()

    def _supervision(self) -> Iterator[Metric]:
        workers = Metric("trio_streams_workers", "Worker processes the supervisor keeps.", "gauge")
        workers.add_sample("trio_streams_workers", {}, len(self._slots))
        up = Metric("trio_streams_worker_up", "1 when the worker answered this scrape.", "gauge")
        restarts = Metric(
            "trio_streams_worker_restarts", "Times the supervisor restarted the worker.", "counter"
        )
        for index, slot in enumerate(self._slots):
            labels = {"worker": str(index)}
            up.add_sample("trio_streams_worker_up", labels, 1 if slot.up else 0)
            restarts.add_sample("trio_streams_worker_restarts_total", labels, slot.restarts)
        yield from (workers, up, restarts)


def _family_of(sample: str, families: dict[str, set[_Key]]) -> str:
    """The family a sample belongs to: its own name, or that name less a sample suffix."""
    for suffix in ("", "_total", "_bucket", "_count", "_sum", "_info"):
        if sample.endswith(suffix) and sample[: len(sample) - len(suffix)] in families:
            return sample[: len(sample) - len(suffix)]
    return ""  # not a sample name the text format makes: left out


def _order(key: _Key) -> tuple[Any, ...]:
    """Labels first, then the sample's name (a histogram's buckets stay in bound order)."""
    sample, labels = key
    plain = tuple((k, v) for k, v in labels if k != "le")
    bound = next((float(v) for k, v in labels if k == "le"), 0.0)
    return (plain, sample.endswith("_bucket") is False, sample, bound)


def _total(name: str, kind: str, sample: str, values: list[float | None]) -> float | None:
    """The app's value of one series, or None when it has none."""
    present = [value for value in values if value is not None]
    if kind in _COUNTED and sample.removeprefix(name) in _COUNTED[kind]:
        return sum(present)
    if kind != "gauge":
        return None
    combine = next((f for end, f in GAUGE_TOTALS.items() if name.endswith(end)), None)
    if combine is None or not present:
        return None
    if combine is min and len(present) < len(values):
        return 0.0  # up: a worker that does not answer is not up
    return combine(present)


class _Exposition(Collector):
    def __init__(self, metrics: list[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterator[Metric]:
        return iter(self._metrics)
