"""Redis stream latency: publish in one process, handle in another, through a consumer group.

One run starts a fresh ``redis-server`` (no persistence, loopback). Each round measures two
contenders on it, one after the other, each with its own stream and a consumer process of its
own; this process publishes ``--fast`` messages 5 ms apart, then ``--slow`` messages 200 ms
apart (an idle consumer, blocked in ``XREADGROUP``, woken by each one):

- **framework**: the consumer is an ``App`` with one ``RedisStream`` subscription whose handler
  notes, for each message, the wall clock minus the send time the message carries; this
  process publishes through a ``RedisBroker``;
- **raw**: the connection layer alone, the floor the framework is built on: ``XADD`` on a
  pooled connection, and a consumer looping ``XREADGROUP COUNT 100 BLOCK`` then ``XACK`` on one
  dedicated connection, noting the same figure for each entry it reads.

It prints, per contender and gap, the medians over ``--runs`` rounds of p50 / p99 / max in
milliseconds, and the framework's p50 and p99 over the raw peer's. Both processes share the
machine's clock; the 2 cores are shared with the server.

Run: ``python benchmarks/redis_stream_latency.py [--fast N] [--slow N] [--runs N]``.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time
from pathlib import Path

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.redis_servers import RedisServer, redis_server
from trio_streams import App, Headers
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import connect

ROOT = Path(__file__).resolve().parent.parent
GAPS = (("5ms", 0.005), ("200ms", 0.2))


def framework_consumer(url: str, key: str) -> None:
    """The handler's process: one line per message, ``<gap label> <latency ns>``."""
    app = App("latency")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(RedisStream(key, group="g"), name="handle")
    async def handle(body: bytes, headers: Headers) -> None:
        now = time.time_ns()
        print(headers["label"], now - int(headers["sent-ns"]), flush=True)

    app.run()


async def raw_consumer(url: str, key: str) -> None:
    """The raw peer's consumer: the same lines, from the connection layer alone."""
    async with connect(url) as redis:
        await redis.execute("XGROUP", "CREATE", key, "g", "$", "MKSTREAM")
        async with redis.dedicated_connection(key) as conn:
            while True:
                reply = await conn.execute(
                    "XREADGROUP", "GROUP", "g", "c", "COUNT", 100, "BLOCK", 1000,
                    "STREAMS", key, ">",
                )  # fmt: skip
                if reply is None:
                    continue
                [(_, entries)] = reply.items() if isinstance(reply, dict) else reply
                for _, fields in entries:
                    now = time.time_ns()
                    values = dict(zip(fields[::2], fields[1::2], strict=True))
                    label = values[b"h:label"].decode()
                    print(label, now - int(values[b"h:sent-ns"]), flush=True)
                await conn.execute("XACK", key, "g", *[entry_id for entry_id, _ in entries])


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def publish_framework(url: str, key: str, fast: int, slow: int) -> None:
    app = App("publisher")
    broker = app.broker(RedisBroker(url))
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        for (label, gap), count in zip(GAPS, (fast, slow), strict=True):
            for _ in range(count):
                await broker.publish(
                    key, b"x", headers={"label": label, "sent-ns": str(time.time_ns())}
                )
                await trio.sleep(gap)
        await running.aclose()


async def publish_raw(url: str, key: str, fast: int, slow: int) -> None:
    async with connect(url) as redis:
        for (label, gap), count in zip(GAPS, (fast, slow), strict=True):
            for _ in range(count):
                await redis.execute(
                    "XADD", key, "*", "_payload", b"x", "h:label", label,
                    "h:sent-ns", str(time.time_ns()),
                )  # fmt: skip
                await trio.sleep(gap)


def measure(
    server: RedisServer, contender: str, key: str, fast: int, slow: int
) -> dict[str, list[float]]:
    """One contender's latencies (ms) per gap label, from a consumer process of its own."""
    url = server.url
    process = subprocess.Popen(
        [sys.executable, __file__, "--consumer", contender, url, key],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        # The consumer's group is created at its open: wait until it exists.
        deadline = time.monotonic() + 30
        while not server.command("EXISTS", key):
            if time.monotonic() > deadline:
                raise SystemExit(f"the {contender} consumer did not start")
            time.sleep(0.05)
        publish = publish_framework if contender == "framework" else publish_raw
        trio.run(publish, url, key, fast, slow)
        lines: list[str] = []
        assert process.stdout is not None
        while len(lines) < fast + slow:
            lines.append(process.stdout.readline())
    finally:
        process.terminate()
        process.wait(20)
    by_label: dict[str, list[float]] = {label: [] for label, _ in GAPS}
    for line in lines:
        label, ns = line.split()
        by_label[label].append(int(ns) / 1e6)
    return by_label


def main(fast: int, slow: int, runs: int) -> None:
    # figures[contender][label] = one (p50, p99, max) per round
    figures: dict[str, dict[str, list[tuple[float, float, float]]]] = {
        name: {label: [] for label, _ in GAPS} for name in ("framework", "raw")
    }
    with redis_server() as server:
        for run in range(runs):
            for contender in ("framework", "raw"):
                latencies = measure(server, contender, f"lat-{contender}-{run}", fast, slow)
                for label, values in latencies.items():
                    figures[contender][label].append(
                        (statistics.median(values), percentile(values, 0.99), max(values))
                    )
    print(f"runs: {runs}; medians over the runs of each figure, in ms")
    medians: dict[tuple[str, str], tuple[float, float, float]] = {}
    for label, _ in GAPS:
        for contender in ("framework", "raw"):
            rows = figures[contender][label]
            median = (
                statistics.median(r[0] for r in rows),
                statistics.median(r[1] for r in rows),
                statistics.median(r[2] for r in rows),
            )
            medians[contender, label] = median
            count = fast if label == "5ms" else slow
            print(
                f"{label:>6} apart, {count:4d} messages, {contender:>9}: p50 {median[0]:.3f} ms, "
                f"p99 {median[1]:.3f} ms, max {median[2]:.3f} ms"
            )
        framework, raw = medians["framework", label], medians["raw", label]
        print(
            f"{label:>6} apart: framework / raw: p50 x{framework[0] / raw[0]:.2f}, "
            f"p99 x{framework[1] / raw[1]:.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", type=int, default=400)
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--consumer", nargs=3, metavar=("KIND", "URL", "KEY"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.consumer:
        kind, url, key = args.consumer
        if kind == "framework":
            framework_consumer(url, key)
        else:
            trio.run(raw_consumer, url, key)
    else:
        main(args.fast, args.slow, args.runs)
