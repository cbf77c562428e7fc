"""The app's metrics made of its workers' scrapes: labels, exact sums, restarts, gaps."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Enum,
    Gauge,
    Histogram,
    Info,
    Summary,
    generate_latest,
)

from trio_streams.running.worker_metrics import AppFigures, WorkerScrape

from .test_metrics import samples as parse

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


class Worker:
    """A worker's own registry, counted by the test."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.received = Counter(
            "trio_streams_received", "r", ["subscription"], registry=self.registry
        )
        self.in_flight = Gauge(
            "trio_streams_in_flight", "f", ["subscription"], registry=self.registry
        )
        self.lag = Gauge("trio_streams_lag_messages", "l", ["subscription"], registry=self.registry)
        self.up = Gauge("trio_streams_up", "u", registry=self.registry)
        self.memory = Gauge("process_resident_memory_bytes", "m", registry=self.registry)
        self.seconds = Histogram(
            "trio_streams_handler_duration_seconds", "h", ["subscription"],
            registry=self.registry, buckets=(0.1, 1.0),
        )  # fmt: skip
        self.sizes = Summary("sizes", "s", registry=self.registry)
        Info("build", "b", registry=self.registry).info({"version": "1.2"})
        Enum("phase", "p", states=["a", "b"], registry=self.registry).state("b")
        self.up.set(1)

    def text(self) -> str:
        return generate_latest(self.registry).decode()


def key(name: str, **labels: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return name, tuple(sorted(labels.items()))


def scrape(figures: AppFigures, workers: list[Worker | None], generations: list[int]) -> Series:
    figures.read(
        WorkerScrape(n, generations[n], None if w is None else w.text())
        for n, w in enumerate(workers)
    )
    return parse(figures.exposition())


def test_every_workers_series_has_a_worker_label_and_the_app_series_is_their_exact_sum() -> None:
    workers = [Worker(), Worker(), Worker()]
    for n, worker in enumerate(workers):
        worker.received.labels("bill").inc(100 * (n + 1))
        worker.in_flight.labels("bill").set(n)
        worker.lag.labels("bill").set(10 + n)
        worker.seconds.labels("bill").observe(0.06 * (n + 1))
        worker.sizes.observe(n)
    got = scrape(AppFigures(3), list(workers), [1, 1, 1])
    received = "trio_streams_received_total"
    assert got[key(received, subscription="bill")] == 600
    assert [got[key(received, subscription="bill", worker=str(n))] for n in range(3)] == [
        100,
        200,
        300,
    ]
    assert got[key("trio_streams_in_flight", subscription="bill")] == 3  # adds up
    assert got[key("trio_streams_lag_messages", subscription="bill")] == 12  # the furthest behind
    assert got[key("trio_streams_up")] == 1
    bucket = "trio_streams_handler_duration_seconds_bucket"
    assert got[key(bucket, subscription="bill", le="0.1")] == 1  # 0.06 only
    assert got[key(bucket, subscription="bill", le="+Inf")] == 3
    assert got[key("sizes_count")] == 3 and got[key("sizes_sum")] == 3
    # A gauge whose meaning across processes is unknown stays per worker.
    assert key("process_resident_memory_bytes") not in got
    assert key("process_resident_memory_bytes", worker="2") in got
    assert not any(name.endswith("_created") for name, _ in got)
    # An info and a state set are per worker too.
    assert got[key("build_info", version="1.2", worker="1")] == 1
    assert key("build_info", version="1.2") not in got
    assert got[key("phase", phase="b", worker="0")] == 1


def test_a_restarted_worker_carries_its_counts_over_and_the_app_total_never_goes_back() -> None:
    figures = AppFigures(2)
    first, other = Worker(), Worker()
    first.received.labels("bill").inc(50)
    other.received.labels("bill").inc(7)
    scrape(figures, [first, other], [1, 1])
    restarted = Worker()  # its counters start again at 0
    restarted.received.labels("bill").inc(3)
    got = scrape(figures, [restarted, other], [2, 1])
    received = "trio_streams_received_total"
    assert got[key(received, subscription="bill", worker="0")] == 53
    assert got[key(received, subscription="bill")] == 60


def test_a_worker_that_does_not_answer_keeps_its_counters_and_loses_its_gauges() -> None:
    figures = AppFigures(2)
    workers = [Worker(), Worker()]
    workers[0].received.labels("bill").inc(5)
    workers[0].in_flight.labels("bill").set(4)
    workers[1].in_flight.labels("bill").set(1)
    scrape(figures, list(workers), [1, 1])
    got = scrape(figures, [None, workers[1]], [1, 1])
    assert got[key("trio_streams_received_total", subscription="bill", worker="0")] == 5
    assert key("trio_streams_in_flight", subscription="bill", worker="0") not in got
    assert got[key("trio_streams_in_flight", subscription="bill")] == 1
    assert got[key("trio_streams_up")] == 0  # not every worker is up
    assert got[key("trio_streams_worker_up", worker="0")] == 0
    assert got[key("trio_streams_worker_up", worker="1")] == 1


def test_a_late_answer_of_a_replaced_process_is_not_counted_again() -> None:
    figures = AppFigures(1)
    old = Worker()
    old.received.labels("bill").inc(10)
    scrape(figures, [old], [1])
    new = Worker()
    new.received.labels("bill").inc(2)
    scrape(figures, [new], [2])
    old.received.labels("bill").inc(1)  # its answer to a scrape that started before the restart
    got = scrape(figures, [old], [1])
    assert got[key("trio_streams_received_total", subscription="bill")] == 12


def test_an_earlier_answer_read_after_a_later_one_does_not_lower_a_counter() -> None:
    figures = AppFigures(1)
    worker = Worker()
    worker.received.labels("bill").inc(4)
    early = worker.text()
    worker.received.labels("bill").inc(4)
    scrape(figures, [worker], [1])
    figures.read([WorkerScrape(0, 1, early)])
    got = parse(figures.exposition())
    assert got[key("trio_streams_received_total", subscription="bill")] == 8
