"""A consumer process whose every handler run is written down: ``python -m
tests.redis.ledger_app URL KIND KEY CONSUMER RUNLOG BEHAVIOUR COUNT WORKERS``.

``KIND`` is ``stream`` (a group ``g`` member, ``min_idle=1``) or ``list`` (a reliable list,
heartbeat 1 s); ``CONSUMER`` its name (``-``: the default). Each run is recorded in the ledger
``RUNLOG`` (``trio_streams.testing.faults.Ledger``) as its handler's first line, so a run that
never returns (the process was killed in it) is on record; a run that returns records its end
(``ack``) and prints ``handled <n>``. ``BEHAVIOUR``: ``ok``; ``slow`` (a millisecond of work);
``poison:<n>`` (the run of ``n`` ends its process at once, ``os._exit``, as a crash would);
``slow-poison:<n>`` (the same, every run taking 0.3 s first).
``max_attempts=3``, dead letters to ``<KEY>.dead``. SIGTERM stops it gracefully.

``LEDGER_LEASE`` (seconds, in the environment) replaces the stream's ``min_idle`` and the list's
heartbeat: a test that makes it long shows that what another consumer takes within far less
was handed back, not taken after the lease ran out.
"""

from __future__ import annotations

import os
import sys

import trio

from trio_streams import App, Context, Position
from trio_streams.core.transport import Source
from trio_streams.redis import RedisBroker, RedisList, RedisStream
from trio_streams.testing.faults import Ledger


def build(
    url: str, kind: str, key: str, consumer: str, runlog: str, behaviour: str, count: int,
    workers: int,
) -> App:  # fmt: skip
    app = App("ledger")
    broker = app.broker(RedisBroker(url))
    name = None if consumer == "-" else consumer
    lease = float(os.environ.get("LEDGER_LEASE", "1.0"))
    source: Source
    if kind == "stream":
        source = RedisStream(
            key, group="g", consumer=name, start=Position.beginning(), min_idle=lease
        )
    else:
        source = RedisList(key, reliable=True, consumer=name, heartbeat=lease, reap_every=0.2)
    ledger = Ledger(runlog)
    poison = int(behaviour.partition(":")[2]) if "poison:" in behaviour else None
    pause = 0.3 if behaviour.startswith("slow-poison:") else 0.0

    @broker.subscriber(
        source, count=count, workers=workers, block=50, max_attempts=3, dead_letter=f"{key}.dead"
    )
    async def handle(n: int, ctx: Context) -> None:
        ledger.run_began(n, ctx.attempt)
        if pause:
            await trio.sleep(pause)
        if n == poison:
            os._exit(3)
        if behaviour == "slow":
            await trio.sleep(0.001)
        ledger.run_ended(n, "ack")
        print(f"handled {n}", flush=True)

    return app


if __name__ == "__main__":
    url, kind, key, consumer, runlog, behaviour, count, workers = sys.argv[1:9]
    build(url, kind, key, consumer, runlog, behaviour, int(count), int(workers)).run()
