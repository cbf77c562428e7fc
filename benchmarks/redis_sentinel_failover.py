"""Writes lost to a demoted primary during a manual sentinel failover.

One run starts a primary, a replica and two sentinels (loopback, no persistence), runs one
writer through a sentinel client (``RPUSH log n`` on a leased connection, so each
acknowledgement names the node that gave it), then forces ``SENTINEL FAILOVER``. It keeps
writing until the new primary has acknowledged writes for a while and the old primary has
become its replica, then prints, per run:

- writes acknowledged by the old primary after the sentinels announced ``+switch-master``,
- how long after the announcement the last of them came (the window),
- writes acknowledged but lost: acknowledged numbers the new primary does not hold (the old
  primary's data is replaced when it turns into a replica).

The announcement time is the sentinel's own log line (milliseconds, wall clock), so the window
is measured on the same clock as the acknowledgements.

Run: ``python benchmarks/redis_sentinel_failover.py [--runs N]``.
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import sys
import time
from pathlib import Path

import trio

# The test servers' launcher lives with the tests (it is not part of the package).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import trio.lowlevel

from tests.redis_servers import RedisSentinelServers, poll_until
from trio_streams.redis.client import ReadOnlyError, RedisConnectionError, RedisError, connect

#: Seconds the writer goes on writing to the new primary before it stops.
SETTLE = 1.0


def log_time(line: str) -> float:
    """The wall-clock time of a redis log line (``pid:X 02 Dec 2026 04:11:06.761 ...``)."""
    match = re.search(r"(\d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2}\.\d{3})", line)
    if match is None:
        raise ValueError(f"no time in {line!r}")
    stamp = datetime.datetime.strptime(match.group(1), "%d %b %Y %H:%M:%S.%f")
    return stamp.timestamp()


async def one_failover(servers: RedisSentinelServers) -> dict[str, float]:
    old = servers.primary()
    acks: list[tuple[int, tuple[str, int], float]] = []  # (n, node, wall time)
    errors = 0
    new_address: tuple[str, int] | None = None
    settled = trio.Event()
    warmed_up = trio.Event()
    async with connect(servers.url, backoff_initial=0.01, backoff_cap=0.1) as client:
        await client.execute("DEL", "log")

        async def writer() -> None:
            nonlocal errors
            n = 0
            first_new_at: float | None = None
            while True:
                n += 1
                try:
                    async with client.connection() as connection:
                        await connection.execute("RPUSH", "log", n)
                        node = connection.address
                except (ReadOnlyError, RedisConnectionError):
                    errors += 1
                    await trio.lowlevel.checkpoint()
                    continue
                now = time.time()
                acks.append((n, node, now))
                if len(acks) == 200:  # writing steadily before the failover
                    warmed_up.set()
                if new_address is not None and node == new_address:
                    first_new_at = first_new_at or now
                    if now - first_new_at > SETTLE:
                        settled.set()
                        return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            await warmed_up.wait()
            marks = [s.log_mark() for s in servers.sentinels]
            new = await trio.to_thread.run_sync(servers.failover)
            new_address = new.address
            lines = [
                s.wait_for_log(rf"\+switch-master {servers.service} ", since=mark)
                for s, mark in zip(servers.sentinels, marks, strict=True)
            ]
            announced = min(log_time(line) for line in lines)
            with trio.fail_after(60):
                await settled.wait()

        def caught_up() -> bool:
            role = old.command("ROLE")
            return bool(role[0] == b"slave" and role[3] == b"connected")

        await trio.to_thread.run_sync(
            lambda: poll_until(caught_up, timeout=60, what="the old primary to be a replica")
        )
        kept = {int(v) for v in await client.execute("LRANGE", "log", 0, -1)}
    old_after = [t for n, node, t in acks if node == old.address and t > announced]
    lost = [n for n, _, _ in acks if n not in kept]
    return {
        "writes": len(acks),
        "old after announcement": len(old_after),
        "window ms": (max(old_after) - announced) * 1000 if old_after else 0.0,
        "lost": len(lost),
        "errors": errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    rows = []
    with RedisSentinelServers(replicas=1, sentinels=2) as servers:
        for _ in range(args.runs):
            rows.append(trio.run(one_failover, servers))
            print(rows[-1], flush=True)
    print(f"\nmedians of {args.runs} manual failovers (one writer, sequential writes)")
    for name in rows[0]:
        print(f"{name:<24}{statistics.median(r[name] for r in rows):>10.1f}")


if __name__ == "__main__":
    try:
        main()
    except RedisError as exc:
        raise SystemExit(f"failed: {exc}") from exc
