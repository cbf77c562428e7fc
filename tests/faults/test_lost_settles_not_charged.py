"""A run whose acknowledgement a lost connection kept from the server is not charged as an
attempt (docs/guides/outcomes.md, "An attempt is a handler run"): an entry whose every flush is
cut, in the pipeline window and the atomic window, is run again until a flush gets through, and
is never dropped or dead-lettered with its handler's writes unapplied."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from trio_streams import App, Context, Delivery
from trio_streams.core.transport import Source
from trio_streams.redis import RedisBroker, RedisList, RedisStream
from trio_streams.redis.client import connect
from trio_streams.testing.faults import FaultProxy, Ledger, issued, ledger_middleware
from trio_streams.testing.servers import RedisServer

STEP = 20.0
MAX_ATTEMPTS = 2
CUTS = 4  # more flushes cut than max_attempts allows runs


def by_payload(delivery: Delivery) -> int:
    return int(delivery.payload)


@pytest.mark.parametrize("kind", ["stream", "list"])
@pytest.mark.parametrize("atomic", [False, True], ids=["window", "atomic"])
async def test_a_run_whose_flush_was_cut_is_not_charged_an_attempt(
    server: RedisServer, proxy: FaultProxy, tmp_path: Path, atomic: bool, kind: str
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    app = App("tally", middlewares=[ledger_middleware(ledger, id_of=by_payload)])
    broker = app.broker(RedisBroker(proxy.url))

    source: Source = (
        RedisStream("{s}", group="g", min_idle=0.2)
        if kind == "stream"
        else RedisList("{s}", reliable=True, heartbeat=1.0, reap_every=0.2)
    )

    @broker.subscriber(
        source, pipeline=True, atomic=atomic, block=50, max_attempts=MAX_ATTEMPTS,
        dead_letter="{s}.dead",
    )  # fmt: skip
    async def tally(n: int, ctx: Context) -> None:
        ctx.pipeline.hincrby("{s}:tally", n, 1)

    # Every flush carrying the handler's write is cut before its acknowledgement is sent.
    marker = "MULTI" if atomic else "HINCRBY"
    fault = proxy.cut_after(commands=1, match=issued(marker))
    async with connect(server.url) as redis, trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        ledger.published(1)
        if kind == "stream":
            await redis.execute("XADD", "{s}", "*", "_payload", "1")
        else:
            await redis.execute("RPUSH", "{s}", bytes(4) + b"1")

        async def cut_enough() -> bool:
            await trio.lowlevel.checkpoint()
            return proxy.injected["cut_after_commands"] >= CUTS

        await eventually(cut_enough, within=STEP, what=f"{CUTS} flushes cut")
        fault.heal()

        async def settled() -> bool:
            if kind == "stream":
                return bool((await redis.execute("XPENDING", "{s}", "g"))[0] == 0)
            keys = [b"{s}", *await redis.execute("KEYS", "{s}:processing:*")]
            held = [await redis.execute("LLEN", k) for k in keys]
            return ledger.check().handled == {1} and sum(held) == 0

        await eventually(settled, within=STEP, what="the entry acknowledged")
        tallies = await redis.execute("HGETALL", "{s}:tally")
        dead = await redis.execute("EXISTS", "{s}.dead")
        await running.aclose()
    report = ledger.check(effects={int(k): int(v) for k, v in tallies.items()})
    print(report)
    assert dead == 0, "an entry whose handler succeeded was dead-lettered"
    assert report.runs[1] > MAX_ATTEMPTS
    assert report.lost == set() and report.settled_without_run == set()
    assert report.effects_missing == set()
    assert int(tallies[b"1"]) >= 1
    if atomic:
        assert int(tallies[b"1"]) == 1, "the atomic window applied the write more than once"
