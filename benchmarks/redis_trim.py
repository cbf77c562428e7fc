"""Redis stream publishing under each trim: what sparing the groups' unacknowledged entries costs.

One run starts a fresh ``redis-server`` (the first on ``PATH``: no persistence, loopback) and,
per round, publishes ``--messages`` entries to a fresh stream through a ``RedisBroker``'s
transport (``--concurrency`` tasks, each awaiting its publish) with ``maxlen=--maxlen``, once
per contender:

- **none**: no trim (the stream grows);
- **plain**: ``trim="unsafe"``, ``XADD … MAXLEN ~ n`` on every publish (can cut unread
  entries; the peer every ratio is against);
- **acked**: ``trim="acked"``, ``XADD … ACKED MAXLEN = n`` every 100th publish (only on a
  server that takes ``ACKED``); **acked/1**: the same on every publish;
- **groups**: ``trim="groups"``, the groups bound computed in the add-then-trim script every
  100th publish; **groups/1**: the script on every publish.

Two stream shapes: **caught up** (two groups that have read and acknowledged everything: a
side task moves them to the tip every 200 publishes) and **lagging** (the same, plus a third
group that never reads: nothing may be trimmed, and the safe forms find that out). Each
figure is the median of ``--rounds`` rounds, contenders alternating within a round; ratios
are to **plain** of the same shape and run. The machine has 2 cores shared by server and
client: compare the ratios.

Run: ``PATH=/dir/of/redis-server:$PATH python benchmarks/redis_trim.py [--messages N]
[--rounds N] [--concurrency N] [--maxlen N]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.redis_servers import redis_binary, redis_server
from trio_streams.redis import RedisBroker
from trio_streams.redis.client import connect

PAYLOAD = b'{"id":1,"amount":9.5}'
#: Publishes between two moves of the caught-up groups to the tip.
CATCH_UP_EVERY = 200

CONTENDERS: dict[str, dict[str, Any]] = {
    "none": {},
    "plain": {"trim": "unsafe"},
    "acked": {"trim": "acked"},
    "acked/1": {"trim": "acked", "trim_every": 1},
    "groups": {"trim": "groups"},
    "groups/1": {"trim": "groups", "trim_every": 1},
}


async def publish_round(
    url: str, key: str, options: dict[str, Any], *, messages: int, concurrency: int,
    maxlen: int, lagging: bool,
) -> float:  # fmt: skip
    """msgs/s publishing ``messages`` entries to ``key`` with trim ``options``."""
    broker = RedisBroker(url, **({"maxlen": maxlen, **options} if options else {}))
    async with connect(url) as side:
        await side.execute("DEL", key)
        groups = ["a", "b", *(["stuck"] if lagging else [])]
        for group in groups:
            await side.execute("XGROUP", "CREATE", key, group, "$", "MKSTREAM")
        published = 0
        async with broker.connect() as transport:

            async def catch_up() -> None:
                for group in ("a", "b"):
                    await side.execute("XGROUP", "SETID", key, group, "$")

            async def publisher(share: int) -> None:
                nonlocal published
                for _ in range(share):
                    await transport.publish(key, PAYLOAD, {})
                    published += 1
                    if published % CATCH_UP_EVERY == 0:
                        await catch_up()

            started = time.perf_counter()
            async with trio.open_nursery() as nursery:
                for n in range(concurrency):
                    share = messages // concurrency + (n < messages % concurrency)
                    nursery.start_soon(publisher, share)
            elapsed = time.perf_counter() - started
        await side.execute("DEL", key)
    return messages / elapsed


async def main(args: argparse.Namespace) -> None:
    with redis_server() as server:
        async with connect(server.url) as probe:
            takes_acked = (await probe.server_commands()).takes("xadd", "ACKED")
            info = (await probe.execute("INFO", "server")).decode()
        fields = dict(line.split(":", 1) for line in info.splitlines() if ":" in line)
        version = fields.get("valkey_version") or fields.get("redis_version", "?")
        names = [n for n in CONTENDERS if takes_acked or not n.startswith("acked")]
        print(f"server: {redis_binary()} ({version}), ACKED taken: {takes_acked}")
        print(
            f"messages per round: {args.messages}, concurrency {args.concurrency}, "
            f"maxlen {args.maxlen}, rounds {args.rounds}"
        )
        for lagging in (False, True):
            rates: dict[str, list[float]] = {name: [] for name in names}
            for round_ in range(args.rounds):
                for name in names:
                    rates[name].append(
                        await publish_round(
                            server.url, f"bench-{name}-{round_}", CONTENDERS[name],
                            messages=args.messages, concurrency=args.concurrency,
                            maxlen=args.maxlen, lagging=lagging,
                        )
                    )  # fmt: skip
            medians = {name: statistics.median(values) for name, values in rates.items()}
            peer = medians["plain"]
            shape = "lagging (a group never reads)" if lagging else "caught up"
            print(f"-- {shape}")
            for name in names:
                print(
                    f"{name:<10} {medians[name] / 1000:7.1f}k msgs/s   x{medians[name] / peer:5.2f}"
                    f" vs plain ({peer / 1000:.1f}k, same run)"
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--maxlen", type=int, default=1_000)
    trio.run(main, parser.parse_args())
