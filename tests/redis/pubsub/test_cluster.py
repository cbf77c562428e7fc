"""Sharded channels on a 3-primary cluster: one reader per node that owns some of the
subscription's channels, SPUBLISH routed by slot, and a slot that moves is a gap, then the
reader follows it to its new node."""

from __future__ import annotations

import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisClusterServers, RedisServer
from tests.support import serving
from trio_streams import App, Context, Destination, Outcome, ack, retry
from trio_streams.redis import RedisBroker, RedisChannel
from trio_streams.redis.client import key_slot

from .support import serving_with_faults


def channels_on_every_node(cluster: RedisClusterServers, prefix: str) -> dict[int, str]:
    """One channel name per primary (by port), each hashing to a slot that primary owns."""
    found: dict[int, str] = {}
    n = 0
    while len(found) < len(cluster.primaries):
        name = f"{prefix}-{n}"
        n += 1
        node = cluster.node_for_slot(key_slot(name))
        found.setdefault(node.port, name)
    return found


def shard_subscribers(server: RedisServer, channel: str) -> int:
    return int(server.command("PUBSUB", "SHARDNUMSUB", channel)[1])


async def test_sharded_channels_on_different_nodes_get_one_reader_each_and_all_deliver(
    redis_cluster: RedisClusterServers,
) -> None:
    by_node = channels_on_every_node(redis_cluster, "psc")
    names = list(by_node.values())
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    seen: list[tuple[str, int, int]] = []
    done = trio.Event()

    @broker.subscriber(RedisChannel(*names, sharded=True), name="sharded")
    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append((ctx.stream, n, ctx.attempt))
        if len(seen) == 2 * len(names):
            done.set()
        return retry() if ctx.attempt == 1 else ack()  # the copy is SPUBLISHed to the slot

    async with serving(app):
        for server in redis_cluster.primaries:  # each node serves its own channel only
            mine = by_node[server.port]
            assert [shard_subscribers(server, c) for c in names] == [
                1 if c == mine else 0 for c in names
            ]
        for n, name in enumerate(names, 1):
            assert await broker.publish(Destination.channel(name, sharded=True), n) == 1
        with trio.fail_after(10):
            await done.wait()
    expected = {(name, n, attempt) for n, name in enumerate(names, 1) for attempt in (1, 2)}
    assert set(seen) == expected


async def test_channels_of_one_node_in_different_slots_share_its_reader_and_all_deliver(
    redis_cluster: RedisClusterServers,
) -> None:
    # A node serves SSUBSCRIBE of one slot per command (CROSSSLOT otherwise): its reader sends
    # one per slot, on its one connection.
    port, first = next(iter(channels_on_every_node(redis_cluster, "pss").items()))
    node = next(s for s in redis_cluster.primaries if s.port == port)
    n = 0
    while True:  # another channel on the same node, in another slot
        second = f"pss-other-{n}"
        n += 1
        slot = key_slot(second)
        if slot != key_slot(first) and redis_cluster.node_for_slot(slot).port == port:
            break
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    seen: set[str] = set()
    done = trio.Event()

    @broker.subscriber(RedisChannel(first, second, sharded=True), name="sharded")
    async def handle(n: int, ctx: Context) -> None:
        seen.add(ctx.stream)
        if len(seen) == 2:
            done.set()

    async with serving(app):
        assert shard_subscribers(node, first) == shard_subscribers(node, second) == 1
        assert node.command("PUBSUB", "SHARDCHANNELS")  # one reader holds both
        for name in (first, second):
            assert await broker.publish(Destination.channel(name, sharded=True), 1) == 1
        with trio.fail_after(10):
            await done.wait()
    assert seen == {first, second}


async def test_a_moved_slot_is_a_gap_and_the_reader_follows_its_channel_to_the_new_node(
    redis_cluster: RedisClusterServers,
) -> None:
    by_node = channels_on_every_node(redis_cluster, "psm")
    [(port, moving), *others] = list(by_node.items())
    source = next(s for s in redis_cluster.primaries if s.port == port)
    target = next(s for s in redis_cluster.primaries if s.port == others[0][0])
    slot = key_slot(moving)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url + "?backoff_initial=0.01&backoff_cap=0.1"))
    seen: list[int] = []
    first = trio.Event()
    after = trio.Event()

    @broker.subscriber(RedisChannel(moving, sharded=True), name="moving")
    async def handle(n: int) -> None:
        seen.append(n)
        (first if n == 1 else after).set()

    try:
        async with serving_with_faults(app) as served:
            await broker.publish(Destination.channel(moving, sharded=True), 1)
            with trio.fail_after(10):
                await first.wait()
            await trio.to_thread.run_sync(redis_cluster.move_slot, slot, target)

            async def on_target() -> bool:
                return shard_subscribers(target, moving) == 1

            await eventually(on_target, within=10, what="the reader on the slot's new node")
            assert await broker.publish(Destination.channel(moving, sharded=True), 2) == 1
            with trio.fail_after(10):
                await after.wait()
            assert served.source("moving").gaps == 1
        assert seen == [1, 2]
        [gap] = [f for f in served.faults if f.kind == "gap" and not f.cleared]
        assert f"shard channel {moving!r}" in gap.message
        assert "slot moved" in gap.message
    finally:
        await trio.to_thread.run_sync(redis_cluster.move_slot, slot, source)
