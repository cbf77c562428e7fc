"""Redis Pub/Sub fan-out: one channel, 10 subscribers, messages delivered per second.

One run starts a fresh ``redis-server`` (no persistence, loopback). Each round measures two
contenders on it, one after the other, each with a channel and a subscriber process of its
own. That process holds the 10 subscribers, each on its own connection:

- **framework**: an ``App`` with 10 ``RedisChannel`` subscriptions of the channel, each with a
  handler that counts its messages (payloads decoded as ``bytes``, the list/Pub/Sub frame read);
- **raw**: the connection layer alone, the floor the framework is built on: 10
  ``client.subscribe([channel])`` iterated by 10 tasks, each decoding the frame and counting.

The 10 subscribers share one process (one core) on purpose: that is what an app with 10
handlers of one channel is, and it measures what the framework costs per delivered message.
Ten processes would measure the server and the scheduling of 10 processes on a machine with
few cores instead, the same for both contenders.

This process publishes ``--messages`` frames as fast as it can (pipelines of 100 ``PUBLISH``,
the same publisher for both contenders) and the subscriber process prints when each of its
subscribers has received them all; the figure is 10 x messages / (last one done - first
publish). Redis buffers what a subscriber has not read yet (its output buffer), so nothing is
lost at these sizes; a run that loses messages (a subscriber disconnected for a full buffer)
fails instead of printing a figure.

It prints, per contender, the median over ``--runs`` rounds of messages delivered per second,
and the framework's rate over the raw peer's.

Run: ``python benchmarks/redis_pubsub_fanout.py [--messages N] [--runs N]``.
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
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisChannel
from trio_streams.redis.client import Message, connect
from trio_streams.redis.frames import decode_frame, encode_frame

ROOT = Path(__file__).resolve().parent.parent
SUBSCRIBERS = 10
PAYLOAD = b'{"id": 12345, "kind": "tick", "value": 1.5}'


def framework_subscribers(url: str, channel: str, messages: int) -> None:
    """Prints ``done <wall ns>`` when each subscriber has received ``messages``."""
    app = App("fanout")
    broker = app.broker(RedisBroker(url))
    for n in range(SUBSCRIBERS):
        counted = [0]

        @broker.subscriber(RedisChannel(channel), name=f"s{n}")
        async def handle(body: bytes, counted: list[int] = counted) -> None:
            counted[0] += 1
            if counted[0] == messages:
                print("done", time.time_ns(), flush=True)

    app.run()


async def raw_subscribers(url: str, channel: str, messages: int) -> None:
    async with connect(url) as redis, trio.open_nursery() as nursery:

        async def one() -> None:
            counted = 0
            async with redis.subscribe([channel]) as subscription:
                async for item in subscription:
                    if isinstance(item, Message):
                        decode_frame(item.data)
                        counted += 1
                        if counted == messages:
                            print("done", time.time_ns(), flush=True)
                    else:
                        raise SystemExit(f"a gap: {item}")

        for _ in range(SUBSCRIBERS):
            nursery.start_soon(one)


async def publish(url: str, channel: str, messages: int) -> int:
    """Publish every message; returns the wall-clock ns of the first publish."""
    frame = encode_frame(PAYLOAD, {"content-type": "application/json"})
    async with connect(url) as redis:
        started = time.time_ns()
        for start in range(0, messages, 100):
            pipeline = redis.pipeline()
            for _ in range(min(100, messages - start)):
                pipeline.add("PUBLISH", channel, frame)
            receivers = await pipeline.execute()
            if any(int(r) != SUBSCRIBERS for r in receivers):
                raise SystemExit(f"a PUBLISH reached {receivers[0]} subscribers, not 10")
    return started


def measure(server: RedisServer, contender: str, channel: str, messages: int) -> float:
    """One contender's delivered messages per second."""
    url = server.url
    process = subprocess.Popen(
        [sys.executable, __file__, "--subscribers", contender, url, channel, str(messages)],
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while int(server.command("PUBSUB", "NUMSUB", channel)[1]) < SUBSCRIBERS:
            if time.monotonic() > deadline:
                raise SystemExit(f"the {contender} subscribers did not start")
            time.sleep(0.05)
        started = trio.run(publish, url, channel, messages)
        assert process.stdout is not None
        done = [int(process.stdout.readline().split()[1]) for _ in range(SUBSCRIBERS)]
    finally:
        process.terminate()
        process.wait(20)
    return SUBSCRIBERS * messages / ((max(done) - started) / 1e9)


def main(messages: int, runs: int) -> None:
    rates: dict[str, list[float]] = {"framework": [], "raw": []}
    with redis_server() as server:
        for run in range(runs):
            for contender in rates:
                rates[contender].append(
                    measure(server, contender, f"fan-{contender}-{run}", messages)
                )
    print(f"runs: {runs}; {messages} messages to {SUBSCRIBERS} subscribers in one process")
    medians = {name: statistics.median(values) for name, values in rates.items()}
    for name, rate in medians.items():
        runs_text = ", ".join(f"{r:,.0f}" for r in rates[name])
        print(f"{name:>9}: {rate:,.0f} msgs/s delivered (median; runs: {runs_text})")
    print(f"framework / raw: x{medians['framework'] / medians['raw']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--subscribers",
        nargs=4,
        metavar=("KIND", "URL", "CHANNEL", "MESSAGES"),
        help=argparse.SUPPRESS,
    )
    args = parser.parse_args()
    if args.subscribers:
        kind, url, channel, count = args.subscribers
        if kind == "framework":
            framework_subscribers(url, channel, int(count))
        else:
            trio.run(raw_subscribers, url, channel, int(count))
    else:
        main(args.messages, args.runs)
