"""Redis request-reply: round trips through a stream and a Pub/Sub reply channel, three ways.

One run starts a fresh ``redis-server`` (no persistence, loopback). Each round measures every
contender on it, one after the other, with 1 and then ``--in-flight`` requests outstanding at
once; each gets a stream of its own. A request carries a number; the responder, a member of
the stream's consumer group, answers with the number doubled, on the Pub/Sub reply channel the
request names; the caller checks every reply against its own request.

- **trio-streams**: an ``App`` whose ``RedisBroker`` has one ``RedisStream`` subscriber,
  ``double(n: int) -> int``, and callers awaiting ``broker.request(n, KEY, reply_type=int)`` on
  the same broker: the request ``XADD``\\ ed with a correlation id and the reply-to channel in
  its headers, the reply read on the process's one Pub/Sub reply connection. The subscriber
  has its defaults (one handler task: requests are answered one after the other); with more
  than one request in flight it also runs as **trio-streams, workers=N**, N handler tasks for
  N requests in flight; and, at every count, as **trio-streams, pipeline=True** (with N
  workers), where each reply's ``PUBLISH`` leaves with its read's ``XACK`` in one write;
- **raw**: the connection layer alone, the floor the framework is built on: callers ``XADD``
  ``{_payload, h:correlation, h:reply-to}`` on the pooled client and wait on one Pub/Sub
  subscription of the process's reply channel (a reader task hands each reply to the caller
  its correlation id names); the responder loops ``XREADGROUP COUNT 100 BLOCK`` on a dedicated
  connection and answers a read with one write: a ``PUBLISH`` of each reply (framed, the
  correlation id in its headers) and the read's ``XACK``;
- **FastStream** (``_faststream_rr_peer.py``): a ``StreamSub`` subscriber of the same group
  shape returning the doubled number, and callers awaiting ``broker.request(n, stream=KEY)``
  (FastStream subscribes to a reply channel of its own for each request). It runs on
  asyncio, in its own process, with the interpreter ``--faststream-python`` names, by default
  this one (the ``bench`` extra installs ``faststream[redis]`` 0.7.0 and ``hiredis``, which
  redis-py parses with: the peer is refused without it, see ``_redis_peers.py``). Without
  FastStream: the script says so in one line and measures the other two.

**Fair shape.** Every contender runs in a fresh process of its own (this script again, or the
FastStream peer), holding both its responder and its callers on one event loop: the same
number of client processes each (one, beside the server, on the 2-core machine), the same
work per request (decode a number, double it, encode it), and nothing of one contender's
loop in another's. A deployed responder is usually another process; here both ends share one
process so that no contender gets a core the others do not. Each contender first answers an
untimed warm-up from the same callers (``WARMUP`` requests, and at least ``WARMUP_PER_CALLER``
a caller: every connection the callers need is open, the group created), then the timed
part: ``--requests`` requests (``--peer-requests`` for FastStream, which is far slower) from
as many callers as requests are in flight, each caller issuing its next request when its
reply arrives. A round trip runs from just before the request is sent to the caller holding
its checked reply; requests/s is the timed part's requests over its wall time. After each
contender the group's pending list must be empty, or the script fails.

It prints, per in-flight count and contender, the medians over ``--runs`` rounds of p50 and
p99 in milliseconds, of requests/s, and of what the server counted per request (``INFO
stats`` after ``CONFIG RESETSTAT``, the warm-up included: its socket reads, one a write of a
client's while it keeps up, and the commands it ran: the round trips counted, not assumed),
then trio-streams against the raw floor (aim: p50 at most x1.3 of raw's) and against
FastStream (aim: at least x5 its requests/s), each a peer of the same run on the same server.

Run: ``python benchmarks/request_reply.py [--requests N] [--peer-requests N] [--runs N]
[--in-flight N] [--server NAME|PATH] [--faststream-python PATH]`` (``--server``: the server
binary, as the tests choose it; see ``redis_drain_args`` in ``_common.py``).
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _redis_peers import FASTSTREAM_SETUP, checked_faststream_python

from tests.redis_servers import RedisServer, redis_server
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import Message, RedisClient, Subscription, connect
from trio_streams.redis.client.protocol import Arg
from trio_streams.redis.frames import decode_frame, encode_frame
from trio_streams.testing.binaries import SERVER_ENV, server_build

ROOT = Path(__file__).resolve().parent.parent
PEER = Path(__file__).with_name("_faststream_rr_peer.py")
#: Requests every contender answers before the timed part, from the same callers: at least
#: ``WARMUP``, and ``WARMUP_PER_CALLER`` per caller (so every connection the callers need is open).
WARMUP = 50
WARMUP_PER_CALLER = 4
#: How long one request may take before the run fails (seconds).
TIMEOUT = 30.0
#: The aims: trio-streams' p50 at most this many times raw's; its requests/s at least this
#: many times FastStream's.
AIM_P50_VS_RAW = 1.3
AIM_RATE_VS_FASTSTREAM = 5.0
FASTSTREAM = "FastStream"
#: The trio-streams responder with as many handler tasks as requests in flight.
WORKERS = "trio-streams, workers=N"
#: The same with the pipeline window: each reply leaves with its read's XACK, in one write.
WINDOW = "trio-streams, pipeline=True"


@dataclass
class Figures:
    """One contender's timed part: p50 and p99 in ms, requests/s; and what the server did per
    request, warm-up included (``INFO stats`` since ``CONFIG RESETSTAT``): socket reads (one a
    write of the client's, as long as the server keeps up) and commands."""

    p50: float
    p99: float
    rate: float
    reads: float
    commands: float


FIELDS = ("p50", "p99", "rate", "reads", "commands")


def percentile(values: list[int], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def warmup(in_flight: int) -> int:
    """How many requests a contender answers before the timed part."""
    return max(WARMUP, WARMUP_PER_CALLER * in_flight)


async def timed(
    ask: Callable[[int], Awaitable[None]], in_flight: int, requests: int
) -> tuple[float, list[int]]:
    """The warm-up, then ``requests`` from ``in_flight`` callers: the timed part's seconds and
    each of its requests' round trip (ns)."""

    async def callers(count: int) -> list[int]:
        latencies: list[int] = []
        numbers = iter(range(count))

        async def caller() -> None:
            for n in numbers:
                sent = time.perf_counter_ns()
                await ask(n)
                latencies.append(time.perf_counter_ns() - sent)

        async with trio.open_nursery() as nursery:
            for _ in range(in_flight):
                nursery.start_soon(caller)
        return latencies

    await callers(warmup(in_flight))
    started = time.perf_counter()
    latencies = await callers(requests)
    return time.perf_counter() - started, latencies


def checked(n: int, value: int) -> None:
    if value != 2 * n:
        raise AssertionError(f"request {n}: the reply is {value!r}, not {2 * n}")


async def trio_streams_contender(
    url: str, key: str, in_flight: int, requests: int, workers: int = 1, window: bool = False
) -> tuple[float, list[int]]:
    app = App("request-reply")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(RedisStream(key, group="g"), name="double", workers=workers, pipeline=window)
    async def double(n: int) -> int:
        return n * 2

    async def ask(n: int) -> None:
        checked(n, await broker.request(n, key, timeout=TIMEOUT, reply_type=int))

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        result = await timed(ask, in_flight, requests)
        await running.aclose()
    return result


class _Waiting:
    """A caller's request whose reply has not come yet."""

    __slots__ = ("arrived", "reply")

    def __init__(self) -> None:
        self.arrived = trio.Event()
        self.reply = b""


async def raw_responder(redis: RedisClient, key: str) -> None:
    """Answer every request of ``key``'s group ``g``: one write per read, the replies and
    the read's XACK."""
    async with redis.dedicated_connection(key) as conn:
        while True:
            reply = await conn.execute(
                "XREADGROUP", "GROUP", "g", "c", "COUNT", 100, "BLOCK", 1000,
                "STREAMS", key, ">",
            )  # fmt: skip
            if reply is None:
                continue
            [(_, entries)] = reply.items() if isinstance(reply, dict) else reply
            commands: list[list[Arg]] = []
            for _, fields in entries:
                values = dict(zip(fields[::2], fields[1::2], strict=True))
                answer = str(2 * int(values[b"_payload"])).encode()
                frame = encode_frame(answer, {"correlation": values[b"h:correlation"].decode()})
                commands.append(["PUBLISH", values[b"h:reply-to"], frame])
            commands.append(["XACK", key, "g", *[entry_id for entry_id, _ in entries]])
            (await conn.execute_many(commands)).raise_first()


async def raw_replies(subscription: Subscription, waiting: dict[str, _Waiting]) -> None:
    """Hand each reply on the process's channel to the caller its correlation id names."""
    async for item in subscription:
        if not isinstance(item, Message):
            raise AssertionError(f"the reply channel lost its connection: {item}")
        payload, headers = decode_frame(item.data)
        request = waiting.pop(headers["correlation"], None)
        if request is not None:
            request.reply = payload
            request.arrived.set()


async def raw_contender(
    url: str, key: str, in_flight: int, requests: int
) -> tuple[float, list[int]]:
    channel = f"reply:{uuid.uuid4().hex}"
    correlations = itertools.count()
    waiting: dict[str, _Waiting] = {}
    async with connect(url) as redis:
        await redis.execute("XGROUP", "CREATE", key, "g", "$", "MKSTREAM")

        async def ask(n: int) -> None:
            correlation = str(next(correlations))
            request = waiting[correlation] = _Waiting()
            with trio.fail_after(TIMEOUT):
                await redis.execute(
                    "XADD", key, "*", "_payload", str(n),
                    "h:correlation", correlation, "h:reply-to", channel,
                )  # fmt: skip
                await request.arrived.wait()
            checked(n, int(request.reply))

        async with redis.subscribe([channel]) as subscription, trio.open_nursery() as nursery:
            nursery.start_soon(raw_responder, redis, key)
            nursery.start_soon(raw_replies, subscription, waiting)
            result = await timed(ask, in_flight, requests)
            nursery.cancel_scope.cancel()
    return result


def contender_process(kind: str, url: str, key: str, in_flight: int, requests: int) -> None:
    """This script as one contender's process: one JSON line, the seconds and the round trips."""
    if kind == "raw":
        elapsed, ns = trio.run(raw_contender, url, key, in_flight, requests)
    else:
        workers = in_flight if kind in ("trio-streams-workers", "trio-streams-window") else 1
        window = kind == "trio-streams-window"
        elapsed, ns = trio.run(
            trio_streams_contender, url, key, in_flight, requests, workers, window
        )
    print(json.dumps({"elapsed": elapsed, "ns": ns}))


def measure(
    server: RedisServer, command: list[str], key: str, in_flight: int, requests: int
) -> tuple[dict[str, Any], Figures]:
    """Run one contender's process; its output and figures, once its group has nothing pending."""
    server.command("CONFIG", "RESETSTAT")
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{command[1:3]} failed ({done.returncode}):\n{done.stderr}")
    info = server.command("INFO", "stats").decode()
    stats = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
    result = json.loads(done.stdout.splitlines()[-1])
    ns: list[int] = result["ns"]
    if len(ns) != requests:
        raise AssertionError(f"{key}: {len(ns)} round trips of {requests} requests")
    pending = server.command("XPENDING", key, "g")[0]
    if pending != 0:
        raise AssertionError(f"{key}: {pending} requests still pending after the run")
    answered = requests + warmup(in_flight)
    return result, Figures(
        percentile(ns, 0.5) / 1e6,
        percentile(ns, 0.99) / 1e6,
        len(ns) / result["elapsed"],
        int(stats["total_reads_processed"]) / answered,
        int(stats["total_commands_processed"]) / answered,
    )


def faststream_python(chosen: str | None) -> str | None:
    """The interpreter the FastStream peer runs with (checked: faststream[redis] and hiredis),
    or None (said in one line) if none has FastStream."""
    if chosen is None:
        if importlib.util.find_spec("faststream") is None:
            print(f"FastStream: not measured: {sys.executable} has none ({FASTSTREAM_SETUP})")
            return None
        chosen = sys.executable
    return checked_faststream_python(chosen)


def aim(ratio: float, target: float, *, at_most: bool) -> str:
    met = ratio <= target if at_most else ratio >= target
    sign = "<=" if at_most else ">="
    return f"x{ratio:.2f} (aim {sign} x{target:g}: {'met' if met else 'NOT met'})"


def command_of(
    name: str, peer: str | None, url: str, key: str, in_flight: int, count: int
) -> list[str]:
    """The command line of one contender's process."""
    if name == FASTSTREAM:
        assert peer is not None
        return [peer, str(PEER), url, key, str(in_flight), str(count), str(warmup(in_flight))]
    kind = {WORKERS: "trio-streams-workers", WINDOW: "trio-streams-window"}.get(name, name)
    return [sys.executable, __file__, "--contender", kind, url, key, str(in_flight), str(count)]


def contenders(in_flight: int, peer: str | None) -> list[str]:
    """Who runs at ``in_flight``: the workers variant only where it differs from the default."""
    return [
        "trio-streams",
        *([WORKERS] if in_flight > 1 else []),
        WINDOW,
        "raw",
        *([FASTSTREAM] if peer else []),
    ]


def main(args: argparse.Namespace) -> None:
    peer = faststream_python(args.faststream_python)
    in_flights = (1, args.in_flight)
    rounds: dict[tuple[str, int], list[Figures]] = {}
    version = ""
    with redis_server() as server:
        for run in range(args.runs):
            for in_flight in in_flights:
                for name in contenders(in_flight, peer):
                    key = f"rr-{re.sub('[^a-z]+', '-', name.lower())}-{in_flight}-{run}"
                    count = args.peer_requests if name == FASTSTREAM else args.requests
                    command = command_of(name, peer, server.url, key, in_flight, count)
                    result, got = measure(server, command, key, in_flight, count)
                    version = str(result.get("version", version))
                    rounds.setdefault((name, in_flight), []).append(got)
    peer_count = f" (FastStream: {args.peer_requests})" if peer else ""
    print(
        f"requests per run: {args.requests}{peer_count}, after an untimed warm-up; "
        f"runs: {args.runs}; medians over the runs of each figure"
    )
    for in_flight in in_flights:
        report(in_flight, contenders(in_flight, peer), rounds, version)


def report(
    in_flight: int, names: list[str], rounds: dict[tuple[str, int], list[Figures]], version: str
) -> None:
    """One in-flight count's figures, then each trio-streams row against its peers."""
    medians: dict[str, Figures] = {}
    for name in names:
        each = rounds[name, in_flight]
        medians[name] = m = Figures(
            *(statistics.median(getattr(f, field) for f in each) for field in FIELDS)
        )
        label = f"FastStream {version}" if name == FASTSTREAM else name
        print(
            f"{in_flight:3d} in flight, {label:>24}: p50 {m.p50:7.3f} ms, "
            f"p99 {m.p99:7.3f} ms, {m.rate:6.0f} requests/s; server: "
            f"{m.reads:4.2f} reads, {m.commands:4.2f} commands a request"
        )
    raw = medians["raw"]
    for name in ("trio-streams", WORKERS, WINDOW):
        if name not in medians:
            continue
        ours = medians[name]
        print(
            f"{in_flight:3d} in flight: {name} / raw (same run): p50 "
            f"{aim(ours.p50 / raw.p50, AIM_P50_VS_RAW, at_most=True)}, "
            f"p99 x{ours.p99 / raw.p99:.2f}, requests/s x{ours.rate / raw.rate:.2f}"
        )
        if FASTSTREAM in medians:
            fs = medians[FASTSTREAM]
            print(
                f"{in_flight:3d} in flight: {name} / FastStream (same run): requests/s "
                f"{aim(ours.rate / fs.rate, AIM_RATE_VS_FASTSTREAM, at_most=False)}, "
                f"p50 x{ours.p50 / fs.p50:.2f}"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5_000)
    parser.add_argument("--peer-requests", type=int, default=1_000, help="FastStream's")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--in-flight", type=int, default=64, help="besides 1")
    parser.add_argument("--server", metavar="NAME|PATH", default=None)
    parser.add_argument("--faststream-python", metavar="PATH", default=None)
    parser.add_argument(
        "--contender", nargs=5, metavar=("KIND", "URL", "KEY", "N", "R"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.contender:
        kind, url, key, in_flight, requests = args.contender
        contender_process(kind, url, key, int(in_flight), int(requests))
    else:
        if args.server is not None:
            os.environ[SERVER_ENV] = args.server
        print(f"server: {server_build().label}")
        main(args)
