"""Scrape latency of ``/metrics`` for an app in N workers against the same app in one process.

One run starts two fresh ``redis-server`` (no persistence, loopback), puts ``--entries``
entries in a stream of each, and starts the same app (``tests.cli.worker_apps:metered``: a
consumer group and the ``PrometheusMiddleware``) twice, side by side, one on each server:

- **single**: ``trio-streams run APP --http`` — one process answers its own ``/metrics``;
- **workers**: ``trio-streams run APP --workers N --http`` — the supervisor asks each worker
  over its private socket, merges the texts (a ``worker`` label on every series, the app's
  sums) and answers.

Once both are ready and the entries handled, it scrapes each in turn (alternating, so a
disturbance hits both) ``--scrapes`` times, each scrape a new connection as Prometheus makes
by default, and prints the median and 90th percentile latency of each and the ratio of the
medians, for each ``--workers`` count. The machine has 2 cores shared by the server and every
process: compare the ratios.

Run: ``python benchmarks/workers_scrape.py [--workers 2 4] [--scrapes N] [--entries N]``.
"""

from __future__ import annotations

import argparse
import http.client
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(ROOT))

from tests.redis_servers import RedisServer, free_port, poll_until, redis_server  # noqa: E402

APP = "tests.cli.worker_apps:metered"


def get(port: int, path: str) -> tuple[int, bytes]:
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        connection.request("GET", path)
        answer = connection.getresponse()
        return answer.status, answer.read()
    finally:
        connection.close()


def answers(port: int, path: str, status: int) -> bool:
    try:
        return get(port, path)[0] == status
    except OSError:
        return False


@contextmanager
def running(url: str, *args: str) -> Iterator[int]:
    """``trio-streams run APP --http`` (and ``args``), ready; its port."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "trio_streams", "run", APP, "--http", f"127.0.0.1:{port}",
         "--log-level", "warning", *args],
        cwd=ROOT, env={**os.environ, "TS_TEST_REDIS_URL": url},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        poll_until(lambda: answers(port, "/readyz", 200), timeout=60, what=f"{args} ready")
        yield port
    finally:
        process.terminate()
        process.wait(30)


def scrape_ms(port: int) -> tuple[float, int]:
    started = time.perf_counter()
    status, body = get(port, "/metrics")
    assert status == 200, body[:200]
    return (time.perf_counter() - started) * 1000, len(body)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[2, 4])
    parser.add_argument("--scrapes", type=int, default=200)
    parser.add_argument("--entries", type=int, default=2000)
    args = parser.parse_args()
    # A server for each, so the single process and worker 0 are not one consumer of a group.
    with redis_server() as alone, redis_server() as shared:
        publish(alone, args.entries)
        with running(alone.url) as single:
            wait_counted(single, args.entries)
            for workers in args.workers:
                publish(shared, args.entries)  # each run of workers handles as many
                with running(shared.url, "--workers", str(workers)) as supervised:
                    wait_counted(supervised, args.entries)
                    times: dict[str, list[float]] = {"single": [], "workers": []}
                    sizes = {}
                    for _ in range(args.scrapes):
                        for name, port in (("single", single), ("workers", supervised)):
                            ms, sizes[name] = scrape_ms(port)
                            times[name].append(ms)
                    report(workers, times, sizes)


def publish(server: RedisServer, entries: int) -> None:
    for n in range(entries):
        server.command("XADD", "metered", "*", "_payload", str(n))


def wait_counted(port: int, total: int) -> None:
    """Until the app's total of received messages is ``total``."""
    line = f'trio_streams_received_total{{subscription="count"}} {float(total)}'.encode()
    poll_until(
        lambda: line in get(port, "/metrics")[1].splitlines(), timeout=60, what=f"{total} received"
    )


def report(workers: int, times: dict[str, list[float]], sizes: dict[str, int]) -> None:
    figures = {}
    for name, values in times.items():
        p50 = statistics.median(values)
        p90 = statistics.quantiles(values, n=10)[-1]
        figures[name] = p50
        label = "1 process" if name == "single" else f"{workers} workers (supervisor)"
        print(
            f"{label:<28} /metrics p50 {p50:7.2f} ms  p90 {p90:7.2f} ms  "
            f"({sizes[name]} bytes, {len(values)} scrapes)"
        )
    print(
        f"  ratio (same run): {workers} workers / 1 process = "
        f"x{figures['workers'] / figures['single']:.2f} p50"
    )


if __name__ == "__main__":
    main()
