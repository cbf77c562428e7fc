"""The ledger on a real app under a real fault: a cut that falls between a handler's write and its
acknowledgement (the fault proxy, a real redis-server) is seen by the checker as an effect
applied twice — unless the window is atomic, when it is applied once and the rerun is only a
duplicate."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from trio_streams import App, Context, Delivery
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import connect
from trio_streams.testing.faults import FaultProxy, Ledger, issued, ledger_middleware
from trio_streams.testing.servers import RedisServer

STEP = 15.0


def by_payload(delivery: Delivery) -> int:
    return int(delivery.payload)


@pytest.mark.parametrize(("atomic", "applied"), [(False, 2), (True, 1)], ids=["plain", "atomic"])
async def test_a_cut_between_a_write_and_its_ack_shows_as_an_effect_applied_twice_unless_atomic(
    server: RedisServer, proxy: FaultProxy, tmp_path: Path, atomic: bool, applied: int
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    app = App("tally", middlewares=[ledger_middleware(ledger, id_of=by_payload)])
    broker = app.broker(RedisBroker(proxy.url))

    # min_idle=1: the entry whose flush was cut is reclaimed and run again within a second or two.
    @broker.subscriber(
        RedisStream("{s}", group="g", min_idle=1.0), pipeline=True, atomic=atomic, block=50
    )
    async def tally(n: int, ctx: Context) -> None:
        ctx.pipeline.hincrby("{s}:tally", n, 1)

    # The flush's HINCRBY reaches the server, then its connection is cut: the XACK (and, in the
    # atomic window, the EXEC) never does.
    fault = proxy.cut_after(commands=1, match=issued("HINCRBY"))
    async with connect(server.url) as redis, trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        ledger.published(1)
        await redis.execute("XADD", "{s}", "*", "_payload", "1")

        async def cut() -> bool:
            await trio.lowlevel.checkpoint()
            return proxy.injected["cut_after_commands"] > 0

        async def settled() -> bool:
            pending = (await redis.execute("XPENDING", "{s}", "g"))[0]
            return ledger.check().runs[1] >= 2 and pending == 0

        await eventually(cut, within=STEP, what="the flush cut")
        fault.heal()
        await eventually(settled, within=STEP, what="the entry run again and acknowledged")
        tallies = await redis.execute("HGETALL", "{s}:tally")
        await running.aclose()
    report = ledger.check(effects={int(k): int(v) for k, v in tallies.items()})
    print(report)
    assert report.runs[1] == 2 and report.duplicates == {1: 1}  # run again: allowed
    assert report.lost == set() and report.settled_without_run == set()
    if atomic:
        assert report.effects_twice == {} and report.ok
    else:
        assert report.effects_twice == {1: applied} and not report.ok
        assert "effects applied twice            1: 1 x2" in report.block()
