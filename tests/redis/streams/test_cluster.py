"""Group subscriptions on a Redis Cluster: keys in one slot work atomically; keys that cannot
be one transaction are refused at mount, naming them."""

from __future__ import annotations

import secrets

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisClusterServers
from tests.support import serving
from trio_streams import App, Context, Outcome, Position, ack, retry, retry_after
from trio_streams.core.errors import UnsupportedError
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import connect, key_slot
from trio_streams.redis.delays import delay_key


def test_a_dead_letter_in_another_slot_is_refused_at_mount_naming_both_keys(
    redis_cluster: RedisClusterServers,
) -> None:
    broker = RedisBroker(redis_cluster.url)
    stream, dead = "orders", "orders.dead"
    # On different nodes of the cluster, not only in different slots.
    assert redis_cluster.node_for_slot(key_slot(stream)) is not redis_cluster.node_for_slot(
        key_slot(dead)
    )

    async def handle(n: int) -> None: ...

    with pytest.raises(UnsupportedError, match=r"'orders\.dead' and stream 'orders'"):
        broker.subscriber(RedisStream(stream, group="g"), dead_letter=dead)(handle)


def test_the_same_layout_is_accepted_off_a_cluster() -> None:
    broker = RedisBroker("redis://127.0.0.1:1")

    @broker.subscriber(RedisStream("orders", group="g"), dead_letter="orders.dead")
    async def handle(n: int) -> None: ...


async def test_on_a_cluster_retries_delays_and_dead_letters_run_atomically_in_one_slot(
    redis_cluster: RedisClusterServers,
) -> None:
    tag = "{" + secrets.token_hex(4) + "}"
    stream, dead = f"{tag}.orders", f"{tag}.dead"
    # The subscription's keys live on one node; other tests' keys spread over the others.
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    seen: list[tuple[int, int]] = []

    source = RedisStream(stream, group="g", start=Position.beginning())

    @broker.subscriber(source, name="sub", block=50, max_attempts=3, dead_letter=dead)
    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append((n, ctx.attempt))
        if ctx.attempt == 1:
            return retry()
        if ctx.attempt == 2:
            return retry_after(0.2)
        raise ValueError("spent")

    async with connect(redis_cluster.url) as redis:
        async with serving(app):
            await broker.publish(stream, 1)

            async def dead_lettered() -> bool:
                return bool(await redis.execute("XLEN", dead))

            await eventually(dead_lettered, within=20, what="the dead letter")

            async def settled() -> bool:
                summary = await redis.execute("XPENDING", stream, "g")
                return bool(summary[0] == 0)

            await eventually(settled, within=20, what="an empty pending list")
        assert await redis.execute("ZCARD", f"{stream}:delayed") == 0
    assert seen == [(1, 1), (1, 2), (1, 3)]


@pytest.mark.parametrize("stream", ["a}b", "x{}y", "{}", "}{", "{a}b{c}"])
async def test_retry_after_on_a_stream_whose_braces_make_no_tag_is_scheduled_and_promoted(
    redis_cluster: RedisClusterServers, stream: str
) -> None:
    # The delay set is derived from the stream's name; its scripts (schedule: ZADD + XACK,
    # promote: XADD + ZREM) run only if it lands in the stream's slot.
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    seen: list[int] = []
    handled = trio.Event()

    @broker.subscriber(
        RedisStream(stream, group="g", start=Position.beginning()), name="handle", block=50
    )
    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append(ctx.attempt)
        if ctx.attempt == 1:
            return retry_after(0.05)
        handled.set()
        return ack()

    async with connect(redis_cluster.url) as redis:
        await redis.execute("DEL", stream)
        async with serving(app) as running:
            await broker.publish(stream, 1)
            with trio.fail_after(20):
                await handled.wait()
            assert running.stats()["handle"].faults == 0
        assert await redis.execute("ZCARD", delay_key(stream)) == 0
    assert seen == [1, 2]


@pytest.mark.parametrize("stream", ["orders", "a}b", "x{}y", "}{"])
def test_the_refusal_of_a_dead_letter_in_another_slot_suggests_one_in_the_streams_slot(
    redis_cluster: RedisClusterServers, stream: str
) -> None:
    broker = RedisBroker(redis_cluster.url)
    dead = f"{secrets.token_hex(4)}.dead"
    while key_slot(dead) == key_slot(stream):
        dead = f"{secrets.token_hex(4)}.dead"

    async def handle(n: int) -> None: ...

    with pytest.raises(UnsupportedError, match=r"e\.g\. '(.+)'$") as refused:
        broker.subscriber(RedisStream(stream, group="g"), dead_letter=dead)(handle)
    suggested = refused.value.args[0].rsplit("e.g. '", 1)[1][:-1]
    assert key_slot(suggested) == key_slot(stream), suggested
    broker.subscriber(RedisStream(stream, group="g"), dead_letter=suggested)(handle)
