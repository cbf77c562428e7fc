"""Redis Pub/Sub latency: publish in one process, handle in another, through a channel.

One run starts a fresh ``redis-server`` (no persistence, loopback). Each round measures two
contenders on it, one after the other, each with its own channel and a subscriber process of
its own; this process publishes ``--fast`` messages 5 ms apart, then ``--slow`` messages 200 ms
apart (an idle subscriber, woken by each one):

- **framework**: the subscriber is an ``App`` with one ``RedisChannel`` subscription whose
  handler notes, for each message, the wall clock minus the send time the message carries (a
  header); this process publishes through a ``RedisBroker`` (``PUBLISH`` of the list/Pub/Sub
  frame);
- **raw**: the connection layer alone, the floor the framework is built on: ``PUBLISH`` on a
  pooled connection of a frame with the same header, and a subscriber iterating
  ``client.subscribe([channel])``, decoding the frame and noting the same figure.

It prints, per contender and gap, the medians over ``--runs`` rounds of p50 / p99 / max in
milliseconds, and the framework's p50 and p99 over the raw peer's. Both processes share the
machine's clock; the cores are shared with the server.

Run: ``python benchmarks/redis_pubsub_latency.py [--fast N] [--slow N] [--runs N]``.
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
from trio_streams import App, Destination, Headers
from trio_streams.redis import RedisBroker, RedisChannel
from trio_streams.redis.client import Message, connect
from trio_streams.redis.frames import decode_frame, encode_frame

ROOT = Path(__file__).resolve().parent.parent
GAPS = (("5ms", 0.005), ("200ms", 0.2))


def framework_subscriber(url: str, channel: str) -> None:
    """The handler's process: one line per message, ``<gap label> <latency ns>``."""
    app = App("latency")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(RedisChannel(channel), name="handle")
    async def handle(body: bytes, headers: Headers) -> None:
        now = time.time_ns()
        print(headers["label"], now - int(headers["sent-ns"]), flush=True)

    app.run()


async def raw_subscriber(url: str, channel: str) -> None:
    """The raw peer's subscriber: the same lines, from the connection layer alone."""
    async with connect(url) as redis, redis.subscribe([channel]) as subscription:
        async for item in subscription:
            if not isinstance(item, Message):
                continue
            now = time.time_ns()
            _, headers = decode_frame(item.data)
            print(headers["label"], now - int(headers["sent-ns"]), flush=True)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def publish_framework(url: str, channel: str, fast: int, slow: int) -> None:
    app = App("publisher")
    broker = app.broker(RedisBroker(url))
    destination = Destination.channel(channel)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        for (label, gap), count in zip(GAPS, (fast, slow), strict=True):
            for _ in range(count):
                await broker.publish(
                    destination, b"x", headers={"label": label, "sent-ns": str(time.time_ns())}
                )
                await trio.sleep(gap)
        await running.aclose()


async def publish_raw(url: str, channel: str, fast: int, slow: int) -> None:
    async with connect(url) as redis:
        for (label, gap), count in zip(GAPS, (fast, slow), strict=True):
            for _ in range(count):
                frame = encode_frame(b"x", {"label": label, "sent-ns": str(time.time_ns())})
                await redis.execute("PUBLISH", channel, frame)
                await trio.sleep(gap)


def measure(
    server: RedisServer, contender: str, channel: str, fast: int, slow: int
) -> dict[str, list[float]]:
    """One contender's latencies (ms) per gap label, from a subscriber process of its own."""
    url = server.url
    process = subprocess.Popen(
        [sys.executable, __file__, "--subscriber", contender, url, channel],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        # A message published before the subscriber has subscribed is gone: wait for it.
        deadline = time.monotonic() + 30
        while int(server.command("PUBSUB", "NUMSUB", channel)[1]) < 1:
            if time.monotonic() > deadline:
                raise SystemExit(f"the {contender} subscriber did not start")
            time.sleep(0.05)
        publish = publish_framework if contender == "framework" else publish_raw
        trio.run(publish, url, channel, fast, slow)
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
        "--subscriber", nargs=3, metavar=("KIND", "URL", "CHANNEL"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.subscriber:
        kind, url, channel = args.subscriber
        if kind == "framework":
            framework_subscriber(url, channel)
        else:
            trio.run(raw_subscriber, url, channel)
    else:
        main(args.fast, args.slow, args.runs)
