"""An app on a RedisBroker through the fault proxy: it keeps handling messages across cuts."""

from __future__ import annotations

import json

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.support import serving
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import connect
from trio_streams.redis.wire import encode_fields
from trio_streams.testing.faults import FaultProxy, FaultSchedule, issued
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


def app_on(
    url: str, handled: list[int], *, min_idle: float = 60.0, **app_options: float
) -> tuple[App, RedisBroker]:
    app = App("svc", **app_options)  # type: ignore[arg-type]
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(RedisStream("s", group="g", min_idle=min_idle), name="sub", block=50)
    async def handle(n: int) -> None:
        handled.append(n)

    return app, broker


async def wait_handled(handled: list[int], wanted: set[int], within: float) -> None:
    """Wait (bounded) until every message of ``wanted`` was handled at least once."""

    async def all_handled() -> bool:
        return wanted <= set(handled)

    await eventually(all_handled, within=within, what=f"{len(wanted)} messages handled")


async def stop_blackholed(proxy: FaultProxy, url: str, *, within: float) -> None:
    """Run an app through ``url``, blackhole it once it handled a message, and stop it: the
    stop must return within ``within`` seconds."""
    handled: list[int] = []
    app, broker = app_on(url, handled, shutdown_timeout=1)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("s", 1)
        await wait_handled(handled, {1}, STEP)
        proxy.blackhole()
        try:
            with trio.fail_after(within):
                await running.aclose()
        finally:  # a stop that overran still ends, once the server answers again
            proxy.heal()
            proxy.cut()
    assert proxy.injected["blackhole"] >= 1


async def test_a_blackholed_apps_stop_completes_within_its_timeouts(proxy: FaultProxy) -> None:
    # The drain's bound (1 s), then one command or connect timeout (1 s) for the reader's
    # close; the rest is slack for a loaded machine.
    url = f"{proxy.url}?command_timeout=1&connect_timeout=1"
    await stop_blackholed(proxy, url, within=1 + 1 + 4)


@pytest.mark.soak  # about 12 s: it waits out the reader's close bound
async def test_a_blackholed_apps_stop_completes_without_a_command_timeout(
    proxy: FaultProxy,
) -> None:
    # The drain's bound (1 s), the reader's close bound (10 s), slack. A lease release that
    # waited, shielded and unbounded, on the hung server once kept this stop from returning.
    await stop_blackholed(proxy, proxy.url, within=1 + 10 + 5)


async def test_an_app_stops_cleanly_while_its_connections_are_cut_and_refused(
    proxy: FaultProxy,
) -> None:
    handled: list[int] = []
    app, broker = app_on(proxy.url, handled, shutdown_timeout=1)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        for n in range(10):
            await broker.publish("s", n)
        await wait_handled(handled, {0}, STEP)
        proxy.refuse_new()
        proxy.cut()
        with trio.fail_after(1 + 5):
            await running.aclose()
        proxy.cut()


async def test_an_app_under_a_seeded_cut_storm_loses_no_message(
    server: RedisServer, proxy: FaultProxy
) -> None:
    handled: list[int] = []
    # An entry whose acknowledgement a cut lost stays pending until a reclaim takes it again
    # (after min_idle): a short one keeps the wait for "every message acknowledged" bounded.
    app, _ = app_on(proxy.url, handled, min_idle=2)
    published = set(range(200))
    storm = FaultSchedule(
        seed=27,
        every=0.05,
        duration=2,
        kinds=("cut", "cut_after_bytes", "cut_after_commands", "reset_mid_reply"),
    )
    async with serving(app), connect(server.url) as direct:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(proxy.run_schedule, storm)
            for n in sorted(published):  # published beside the proxy: only the app is faulted
                await direct.execute("XADD", "s", "*", *encode_fields(json.dumps(n).encode(), {}))
                if n % 20 == 0:
                    await trio.sleep(0.1)
        proxy.heal()
        await wait_handled(handled, published, 30)

        async def all_acknowledged() -> bool:
            summary = await direct.execute("XPENDING", "s", "g")
            return bool(summary[0] == 0)

        await eventually(all_acknowledged, within=STEP, what="every message acknowledged")
    assert set(handled) == published  # nothing lost, nothing invented
    # The whole storm ran, and it bit: how many of its steps found a connection to hit
    # depends on the machine's pace (a cut between reconnects hits nothing), so only the
    # storm's completion and its first bite are fixed.
    assert proxy.applied == list(storm.plan())
    assert sum(proxy.injected.values()) > 0


@pytest.mark.soak
@pytest.mark.parametrize("seed", [1, 2, 3])
async def test_an_app_under_every_kind_of_fault_loses_no_message(
    server: RedisServer, proxy: FaultProxy, seed: int
) -> None:
    handled: list[int] = []
    url = f"{proxy.url}?command_timeout=1&connect_timeout=1"
    app, _ = app_on(url, handled, min_idle=2)  # a lost acknowledgement is reclaimed soon
    published = set(range(1000))
    storm = FaultSchedule(seed=seed, every=0.05, duration=4)  # every kind, blackholes too
    async with serving(app), connect(server.url) as direct:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(proxy.run_schedule, storm)
            for n in sorted(published):
                await direct.execute("XADD", "s", "*", *encode_fields(json.dumps(n).encode(), {}))
                if n % 50 == 0:
                    await trio.sleep(0.2)
        await wait_handled(handled, published, 60)

        async def all_acknowledged() -> bool:
            summary = await direct.execute("XPENDING", "s", "g")
            return bool(summary[0] == 0)

        await eventually(all_acknowledged, within=STEP, what="every message acknowledged")
    assert set(handled) == published
    # The whole storm ran, and it bit: which kinds found a connection to hit follows the
    # machine's pace (a cut between reconnects hits nothing).
    assert proxy.applied == list(storm.plan())
    assert sum(proxy.injected.values()) > 0


async def test_an_app_stops_within_its_timeouts_in_the_middle_of_a_seeded_storm(
    proxy: FaultProxy,
) -> None:
    handled: list[int] = []
    url = f"{proxy.url}?command_timeout=1&connect_timeout=1"
    app, broker = app_on(url, handled, shutdown_timeout=1)
    storm = FaultSchedule(seed=9, every=0.02, duration=30)  # outlasts the stop
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("s", 0)
        await wait_handled(handled, {0}, STEP)
        nursery.start_soon(proxy.run_schedule, storm)

        async def storming() -> bool:
            return sum(proxy.injected.values()) >= 5

        await eventually(storming, within=STEP, what="5 faults injected")
        with trio.fail_after(1 + 1 + 10):  # the drain, a command timeout, the close bound
            await running.aclose()
        nursery.cancel_scope.cancel()
    assert proxy.faults == []  # the cancelled schedule healed what it held
