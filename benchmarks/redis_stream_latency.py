"""Redis stream latency: publish in one process, handle in another, through a consumer group.

One run starts a fresh ``redis-server`` (no persistence, loopback) and a consumer process (an
``App`` with one ``RedisStream`` subscription whose handler notes, for each message, the wall
clock minus the send time the message carries). This process then publishes through a
``RedisBroker``: ``--fast`` messages 5 ms apart, then ``--slow`` messages 200 ms apart (an idle
consumer, blocked in ``XREADGROUP``, woken by each one). It prints p50 / p99 / max of each in
milliseconds. Both processes share the machine's clock; the 2 cores are shared with the server.

Run: ``python benchmarks/redis_stream_latency.py [--fast N] [--slow N]``.
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

from tests.redis_servers import redis_server
from trio_streams import App, Headers
from trio_streams.redis import RedisBroker, RedisStream

ROOT = Path(__file__).resolve().parent.parent


def consumer(url: str) -> None:
    """The handler's process: one line per message, ``<gap label> <latency ns>``."""
    app = App("latency")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(RedisStream("lat", group="g"), name="handle")
    async def handle(body: bytes, headers: Headers) -> None:
        now = time.time_ns()
        print(headers["label"], now - int(headers["sent-ns"]), flush=True)

    app.run()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def publish(url: str, fast: int, slow: int) -> None:
    app = App("publisher")
    broker = app.broker(RedisBroker(url))
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        for label, count, gap in (("5ms", fast, 0.005), ("200ms", slow, 0.2)):
            for _ in range(count):
                await broker.publish(
                    "lat", b"x", headers={"label": label, "sent-ns": str(time.time_ns())}
                )
                await trio.sleep(gap)
        await running.aclose()


def main(fast: int, slow: int) -> None:
    with redis_server() as server:
        process = subprocess.Popen(
            [sys.executable, __file__, "--consumer", server.url],
            stdout=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        try:
            # The consumer's group is created at its open: wait until it exists.
            deadline = time.monotonic() + 30
            while not server.command("EXISTS", "lat"):
                if time.monotonic() > deadline:
                    raise SystemExit("the consumer did not start")
                time.sleep(0.05)
            trio.run(publish, server.url, fast, slow)
            lines: list[str] = []
            assert process.stdout is not None
            while len(lines) < fast + slow:
                lines.append(process.stdout.readline())
        finally:
            process.terminate()
            process.wait(20)
    by_label: dict[str, list[float]] = {"5ms": [], "200ms": []}
    for line in lines:
        label, ns = line.split()
        by_label[label].append(int(ns) / 1e6)
    for label, values in by_label.items():
        print(
            f"{label:>6} apart, {len(values):4d} messages: p50 {statistics.median(values):.3f} ms, "
            f"p99 {percentile(values, 0.99):.3f} ms, max {max(values):.3f} ms"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fast", type=int, default=400)
    parser.add_argument("--slow", type=int, default=50)
    parser.add_argument("--consumer", metavar="URL", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.consumer:
        consumer(args.consumer)
    else:
        main(args.fast, args.slow)
