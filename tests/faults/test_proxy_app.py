"""An app on a RedisBroker through the fault proxy: it keeps handling messages across cuts."""

from __future__ import annotations

import trio

from tests.support import serving
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.testing.faults import FaultProxy, issued
from trio_streams.testing.servers import RedisServer

STEP = 15


async def test_an_app_handles_messages_through_the_proxy_and_after_its_reader_is_cut(
    server: RedisServer, proxy: FaultProxy
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(proxy.url))
    handled: list[int] = []
    arrived = trio.Event()

    @broker.subscriber(RedisStream("s", group="g"), name="sub", block=50)
    async def handle(n: int) -> None:
        handled.append(n)
        arrived.set()

    async with serving(app):
        await broker.publish("s", 1)
        with trio.fail_after(STEP):
            await arrived.wait()
        assert proxy.cut(match=issued("XREADGROUP")) >= 1
        for n in range(2, 6):
            await broker.publish("s", n)
        with trio.fail_after(STEP):
            while sorted(set(handled)) != [1, 2, 3, 4, 5]:
                arrived = trio.Event()
                await arrived.wait()
    assert proxy.injected["cut"] >= 1
    assert server.command("XPENDING", "s", "g")[0] == 0  # every one acknowledged
