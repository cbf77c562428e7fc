"""How a Redis request's reply should travel back: the measurement behind the choice.

A request is one ``XADD`` to a stream that a responder reads as a consumer group member
(``XREADGROUP BLOCK``, then ``XACK``); this script varies only how the reply comes back to the
caller, each written on the connection layer alone (no framework), in one process, against one
fresh ``redis-server`` (no persistence, loopback):

- **pubsub** (the peer every ratio is against): the responder ``PUBLISH``es the reply to the
  caller's channel; the caller has one Pub/Sub connection for all its requests in flight.
  Nothing is left at the server; a reply published while that connection is down is gone;
- **list**: the responder ``LPUSH``es to a key of the request's own and sets its expiry (one
  pipeline); the caller waits in ``BLPOP`` on that key — a connection per request in flight. A
  reply survives the caller's reconnect until the key expires;
- **stream**: the responder ``XADD``s to the caller's reply stream (``MAXLEN ~``); the caller
  has one connection in ``XREAD BLOCK`` for all its requests, resuming after the last id it
  saw, so a reply survives a reconnect; the stream stays at the server until trimmed or deleted.

It prints, per way, the round trip's p50 and p99 with one request in flight, and requests/s
with ``--in-flight`` in flight (medians of ``--rounds`` rounds, ways alternating within a
round), and each figure's ratio to **pubsub** of the same run. The machine's 2 cores are shared
by the server, the caller and the responder: compare the ratios.

Run: ``python benchmarks/reply_transports.py [--requests N] [--in-flight N] [--rounds N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.redis_servers import redis_server
from trio_streams.redis.client import Message, RedisClient, connect

WAYS = ("pubsub", "list", "stream")
PAYLOAD = b'{"n":21}'

Reply = Callable[[RedisClient, bytes, bytes], Awaitable[Any]]


async def reply_pubsub(client: RedisClient, reply_to: bytes, cid: bytes) -> None:
    await client.execute("PUBLISH", reply_to, cid)


async def reply_list(client: RedisClient, reply_to: bytes, cid: bytes) -> None:
    key = reply_to + b":" + cid
    await client.pipeline().add("LPUSH", key, cid).add("EXPIRE", key, 60).execute()


async def reply_stream(client: RedisClient, reply_to: bytes, cid: bytes) -> None:
    await client.execute("XADD", reply_to, "MAXLEN", "~", 10_000, "*", "c", cid)


REPLIES: dict[str, Reply] = {"pubsub": reply_pubsub, "list": reply_list, "stream": reply_stream}


async def responder(url: str, stream: str, way: str, *, task_status: Any) -> None:
    """Read requests as a group member and answer each the way under test; until cancelled."""
    reply = REPLIES[way]
    async with connect(url) as client:
        await client.execute("XGROUP", "CREATE", stream, "g", "$", "MKSTREAM")
        task_status.started()
        async with client.dedicated_connection() as reader:
            while True:
                got = await reader.execute(
                    "XREADGROUP", "GROUP", "g", "c", "COUNT", 100, "BLOCK", 1000,
                    "STREAMS", stream, ">",
                )  # fmt: skip
                if not got:
                    continue
                entries = next(iter(got.values())) if isinstance(got, dict) else got[0][1]
                ids = []
                for entry_id, fields in entries:
                    values = dict(zip(fields[::2], fields[1::2], strict=True))
                    await reply(client, values[b"r"], values[b"c"])
                    ids.append(entry_id)
                await client.execute("XACK", stream, "g", *ids)


class Caller:
    """One caller: requests in flight wait on events set by the way's reply reader."""

    def __init__(self, client: RedisClient, stream: str, way: str) -> None:
        self.client = client
        self.stream = stream
        self.way = way
        self.reply_to = f"reply:{uuid.uuid4().hex[:8]}".encode()
        self.waiting: dict[bytes, trio.Event] = {}

    async def request(self) -> None:
        cid = uuid.uuid4().hex.encode()
        done = self.waiting[cid] = trio.Event()
        await self.client.execute(
            "XADD", self.stream, "*", "_payload", PAYLOAD, "c", cid, "r", self.reply_to
        )
        if self.way == "list":
            async with self.client.dedicated_connection() as blocking:
                await blocking.execute("BLPOP", self.reply_to + b":" + cid, 10)
            del self.waiting[cid]
            return
        await done.wait()

    async def read_replies(self, *, task_status: Any) -> None:
        if self.way == "pubsub":
            async with self.client.subscribe([self.reply_to]) as subscription:
                task_status.started()
                async for item in subscription:
                    if isinstance(item, Message):
                        self.waiting.pop(item.data).set()
        elif self.way == "stream":
            last = b"$"
            async with self.client.dedicated_connection() as reader:
                task_status.started()
                while True:
                    got = await reader.execute(
                        "XREAD", "COUNT", 1000, "BLOCK", 1000, "STREAMS", self.reply_to, last
                    )
                    if not got:
                        continue
                    entries = next(iter(got.values())) if isinstance(got, dict) else got[0][1]
                    for entry_id, fields in entries:
                        self.waiting.pop(fields[1]).set()
                        last = entry_id
        else:
            task_status.started()


async def measure(url: str, way: str, round_: int, requests: int, in_flight: int) -> list[float]:
    """p50 and p99 (ms) with one in flight, then requests/s with ``in_flight``."""
    stream = f"rr-{way}-{round_}"
    async with trio.open_nursery() as nursery:
        await nursery.start(responder, url, stream, way)
        async with connect(f"{url}?pool_size={in_flight + 8}") as client:
            caller = Caller(client, stream, way)
            await nursery.start(caller.read_replies)
            for _ in range(50):  # warm up: connections opened, code paths taken
                await caller.request()
            times = []
            for _ in range(requests):
                began = time.perf_counter()
                await caller.request()
                times.append((time.perf_counter() - began) * 1000)
            times.sort()
            p50, p99 = times[len(times) // 2], times[int(len(times) * 0.99)]
            left = requests

            async def worker() -> None:
                nonlocal left
                while left > 0:
                    left -= 1
                    await caller.request()

            began = time.perf_counter()
            async with trio.open_nursery() as workers:
                for _ in range(in_flight):
                    workers.start_soon(worker)
            rate = requests / (time.perf_counter() - began)
        nursery.cancel_scope.cancel()
    return [p50, p99, rate]


async def run(requests: int, in_flight: int, rounds: int, url: str) -> None:
    figures: dict[str, list[list[float]]] = {way: [] for way in WAYS}
    for round_ in range(rounds):
        for way in WAYS:
            figures[way].append(await measure(url, way, round_, requests, in_flight))
    print(f"{rounds} rounds of {requests} requests; medians; ratios to pubsub of this run")
    medians = {
        way: [statistics.median(r[i] for r in rows) for i in range(3)]
        for way, rows in figures.items()
    }
    peer = medians["pubsub"]
    for way in WAYS:
        p50, p99, rate = medians[way]
        print(
            f"{way:>7}: 1 in flight p50 {p50:.3f} ms (x{p50 / peer[0]:.2f}), "
            f"p99 {p99:.3f} ms (x{p99 / peer[1]:.2f}); {in_flight} in flight "
            f"{rate:,.0f} req/s (x{rate / peer[2]:.2f})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--in-flight", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with redis_server() as server:
        trio.run(run, args.requests, args.in_flight, args.rounds, server.url)


if __name__ == "__main__":
    main()
