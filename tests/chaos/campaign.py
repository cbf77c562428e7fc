"""The campaign: every workload under its seeded faults, one row each.

:func:`campaign` starts the servers (a standalone ``redis-server`` and a 3-primary cluster, no
persistence, on free loopback ports), runs the workloads one after the other, each seeded from
the campaign's seed and sized from its minutes, and returns the rows in the table's order.
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from contextlib import AsyncExitStack, ExitStack
from dataclasses import dataclass
from pathlib import Path

import trio

from tests.redis_servers import RedisClusterServers, RedisServer, redis_server
from trio_streams.redis.client import connect
from trio_streams.testing.faults import FaultProxy

from .files_work import FileSize, files_rows
from .history import Row
from .redis_work import Size, Workload

#: The workloads, in the table's order: (name, consumer kind, server, key).
REDIS = (
    ("streams group", "stream", "standalone", "chaos:s"),
    ("streams group, cluster", "stream", "cluster", "{chaos}:c"),
    ("pipeline window", "window", "standalone", "{chaos}:w"),
    ("atomic window", "atomic", "standalone", "{chaos}:a"),
    ("atomic window, cluster", "atomic", "cluster", "{chaos}:ca"),
    ("reliable list", "reliable", "standalone", "chaos:rl"),
    ("simple list", "simple", "standalone", "chaos:sl"),
    ("pubsub", "channel", "standalone", "chaos:ch"),
)
FILES = ("stream file: durable consumers", "stream file: live tail")
NAMES = tuple(name for name, *_ in REDIS) + FILES


@dataclass(frozen=True)
class Sizes:
    """How big each workload is, from the campaign's minutes (the two cores of the machine it
    was sized on run the servers, the consumers and the campaign itself)."""

    redis: Size
    files: FileSize

    @classmethod
    def for_minutes(cls, minutes: float, *, backlog_stops: int = 5) -> Sizes:
        # About a tenth of the time per workload: steady publishing plus settling and stops.
        seconds = max(1.0, minutes * 60 / len(NAMES) * 0.6)
        return cls(
            redis=Size(
                seconds=seconds,
                rate=200,
                backlog=min(2000, int(100 * seconds)),
                fault_every=max(0.4, seconds / 12),
                backlog_stops=backlog_stops,
            ),
            files=FileSize(
                writers=3,
                messages=int(200 * seconds),
                crashes=max(1, int(seconds / 6)),
                kills=max(2, int(seconds / 2)),
            ),
        )


def progress(row: Row, started: float) -> None:
    """One line on stderr as each workload ends (the table comes at the end)."""
    took = trio.current_time() - started
    print(
        f"[{took:6.1f} s] {row.transport}: {row.messages} messages, faults {dict(row.faults)}, "
        f"lost {row.lost}, settled without a run {row.settled_without_run}",
        file=sys.stderr,
        flush=True,
    )


async def campaign(
    *,
    seed: int,
    minutes: float,
    directory: Path,
    only: Sequence[str] = (),
    backlog_stops: int = 5,
    with_cluster: bool = True,
) -> list[Row]:
    """Run every workload (or those whose name holds one of ``only``; those on the cluster
    only if ``with_cluster``); the rows, in order."""
    sizes = Sizes.for_minutes(minutes, backlog_stops=backlog_stops)
    seeds = random.Random(seed)
    wanted = [name for name in NAMES if not only or any(word in name for word in only)]
    rows: list[Row] = []
    started = trio.current_time()
    with ExitStack() as servers:
        standalone: RedisServer | None = None
        cluster: RedisClusterServers | None = None
        for name, kind, where, key in REDIS:
            workload_seed = seeds.randrange(1 << 30)
            if name not in wanted or (where == "cluster" and not with_cluster):
                continue
            if where == "cluster" and cluster is None:
                cluster = servers.enter_context(RedisClusterServers(primaries=3))
            if where == "standalone" and standalone is None:
                standalone = servers.enter_context(redis_server())
            server = cluster if where == "cluster" else standalone
            assert server is not None
            async with AsyncExitStack() as stack:
                redis = await stack.enter_async_context(connect(server.url))
                proxy = None
                if standalone is not None and where == "standalone":
                    # (a cluster's clients follow the addresses its nodes give them: no proxy)
                    proxy = await stack.enter_async_context(
                        FaultProxy.in_front_of(standalone, seed=workload_seed)
                    )
                workload = Workload(
                    name=name,
                    kind=kind,
                    key=key,
                    consumer_url=server.url if proxy is None else proxy.url,
                    proxy=proxy,
                    redis=redis,
                    directory=directory,
                    seed=workload_seed,
                    size=sizes.redis,
                    consumers=1 if kind == "channel" else 2,
                )
                rows.append(await workload.run())
                progress(rows[-1], started)
        file_seed = seeds.randrange(1 << 30)
        if any(name in wanted for name in FILES):
            for row in await files_rows(directory, file_seed, sizes.files):
                if row.transport in wanted:
                    rows.append(row)
                    progress(row, started)
    await trio.lowlevel.checkpoint()
    return rows
