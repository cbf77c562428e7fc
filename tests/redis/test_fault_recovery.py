"""Faults caused by a server that stopped answering clear once it answers again, even on a
quiet stream or list where no later settle or renewal would clear them.

The server is paused (SIGSTOP: its sockets stay open, nothing is answered) under a client with
``command_timeout=1``, while a handler holds a message; the settle that follows and the
renewals time out. After SIGCONT no message is published: health must come back by itself."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import pytest
import trio

from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Destination, RunningApp
from trio_streams.core.app import HealthState
from trio_streams.core.transport import Source
from trio_streams.redis import RedisBroker, RedisList, RedisStream

#: Within how long of SIGCONT every fault must have cleared (s): the periodic tasks that see
#: the server answer run at least once a second.
RECOVERY = 5.0


async def degraded_by(running: RunningApp, kinds: set[str]) -> None:
    """Wait (bounded) until the faults ``kinds`` of subscription ``sub`` all last."""

    def faulted(_: object) -> bool:
        return kinds <= set(running.stats()["sub"].degraded)

    with trio.fail_after(15):
        await running.health.wait_value(faulted)


@asynccontextmanager
async def holding_one(
    server: RedisServer, source: Source, publish: Callable[[RedisBroker], Awaitable[object]]
) -> AsyncIterator[tuple[RunningApp, trio.Event]]:
    """An app whose handler holds the first message it gets until the event yielded is set."""
    app = App("svc")
    broker = app.broker(RedisBroker(f"{server.url}?command_timeout=1"))
    holding, release = trio.Event(), trio.Event()

    @broker.subscriber(source, name="sub", block=50)
    async def handle(n: int) -> None:
        holding.set()
        await release.wait()

    async with serving(app) as running:
        await publish(broker)
        with trio.fail_after(10):
            await holding.wait()
        # Idle pooled connections, so the settle made during the pause is sent on one (each
        # command that times out closes its own) and runs once the server resumes: nothing is
        # left pending to deliver again, which would clear the faults by a later settle.
        async with trio.open_nursery() as nursery:
            for _ in range(8):
                nursery.start_soon(broker.publish, "elsewhere", 0)
        yield running, release


async def recovered(running: RunningApp) -> None:
    with trio.fail_after(RECOVERY):
        await running.health.wait_value(lambda h: h.state is HealthState.RUNNING)
    assert running.stats()["sub"].degraded == ()


@pytest.mark.slow
async def test_a_group_members_flush_and_lease_faults_clear_once_a_paused_server_answers(
    redis_server: RedisServer,
) -> None:
    # Leases renewed every 3 s; nothing idle is claimed until 9 s after the last renewal.
    source = RedisStream("s", group="g", min_idle=9)
    async with holding_one(redis_server, source, lambda b: b.publish("s", 1)) as (running, go):
        redis_server.pause()
        try:
            await degraded_by(running, {"lease"})  # a renewal of the held entry timed out
            go.set()  # the handler returns: its XACK times out
            await degraded_by(running, {"lease", "flush"})
        finally:
            redis_server.resume()
        await recovered(running)  # no message published since


async def test_a_reliable_lists_flush_fault_clears_once_a_paused_server_answers(
    redis_server: RedisServer,
) -> None:
    source = RedisList("jobs", reliable=True)
    publish = lambda b: b.publish(Destination.list("jobs"), 1)  # noqa: E731
    async with holding_one(redis_server, source, publish) as (running, go):
        redis_server.pause()
        try:
            go.set()  # the handler returns: its LREM times out
            await degraded_by(running, {"flush"})
        finally:
            redis_server.resume()
        await recovered(running)  # no message published since
