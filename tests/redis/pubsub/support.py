"""Helpers of the Pub/Sub tests: an app run with its fault observers, raw frames, waits."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from tests.redis.client.redis_waits import eventually
from trio_streams import App, RunningApp
from trio_streams.core.app import RunOptions, connect_broker
from trio_streams.core.host import Fault
from trio_streams.core.subscription import SubscriptionRunner
from trio_streams.redis.client import RedisClient
from trio_streams.redis.pubsub import ChannelSubscription


@dataclass
class Served:
    running: RunningApp
    runners: list[SubscriptionRunner]
    faults: list[Fault] = field(default_factory=list)
    #: At each fault change: its kind, whether it cleared, and the kinds then active.
    changes: list[tuple[str, bool, frozenset[str]]] = field(default_factory=list)

    def source(self, label: str) -> ChannelSubscription:
        [runner] = [r for r in self.runners if r.label == label]
        assert isinstance(runner.source, ChannelSubscription)
        return runner.source


@asynccontextmanager
async def serving_with_faults(app: App) -> AsyncIterator[Served]:
    """Run ``app`` (real transports) recording every fault; shut it down gracefully after."""
    faults: list[Fault] = []
    changes: list[tuple[str, bool, frozenset[str]]] = []

    def observe(fault: Fault) -> None:
        faults.append(fault)
        lasting = frozenset(k for r in options.runners if r.host for k in r.host.active)
        changes.append((fault.kind, fault.cleared, lasting))

    options = RunOptions(connect=connect_broker, shutdown_timeout=5, fault_observers=(observe,))
    async with trio.open_nursery() as nursery:
        running: RunningApp = await nursery.start(app.serve_with, options)
        served = Served(running, options.runners, faults, changes)
        try:
            yield served
        finally:
            await running.aclose()


async def subscribers_of(redis: RedisClient, channel: str, count: int) -> None:
    """Wait until ``channel`` has ``count`` subscribers (PUBSUB NUMSUB), bounded."""

    async def enough() -> bool:
        reply = await redis.execute("PUBSUB", "NUMSUB", channel)
        return int(reply[1]) >= count

    await eventually(enough, within=10, what=f"{count} subscriber(s) of {channel!r}")
