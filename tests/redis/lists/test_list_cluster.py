"""Reliable lists on a Redis Cluster: the list's keys (processing lists, heartbeats, the
consumer set, the delay set) share its slot, so the atomic steps — retry, durable delay, dead
letter, the reaper, the atomic window — run there, on whichever node owns the list."""

from __future__ import annotations

import secrets

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisClusterServers
from tests.support import serving
from trio_streams import App, Context, Destination, Outcome, ack, retry, retry_after
from trio_streams.redis import RedisBroker, RedisList
from trio_streams.redis.client import connect, key_slot
from trio_streams.redis.delays import delay_key
from trio_streams.redis.lists import consumers_key, heartbeat_key, processing_key


def test_a_lists_keys_share_its_slot() -> None:
    for key in ("jobs", "{eu}.jobs", "a{b}c"):
        keys = (
            processing_key(key, "c1"),
            heartbeat_key(key, "c1"),
            consumers_key(key),
            delay_key(key),
        )
        assert {key_slot(k) for k in keys} == {key_slot(key)}, keys


async def test_on_a_cluster_retries_delays_dead_letters_and_the_atomic_window_run_in_one_slot(
    redis_cluster: RedisClusterServers,
) -> None:
    tag = secrets.token_hex(4)
    jobs, dead, total = f"{{{tag}}}.jobs", f"{{{tag}}}.dead", f"{{{tag}}}.total"
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    seen: list[tuple[int, int]] = []

    @broker.subscriber(
        RedisList(jobs, reliable=True, consumer="c1"),
        pipeline=True,
        atomic=True,
        max_attempts=3,
        dead_letter=dead,
    )
    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append((n, ctx.attempt))
        ctx.pipeline.incr(total)
        if n == 2 and ctx.attempt == 1:
            return retry()
        if n == 2 and ctx.attempt == 2:
            return retry_after(0.2)
        if n == 2:
            raise ValueError("spent")
        return ack()

    async with connect(redis_cluster.url) as redis:
        async with serving(app):
            for n in (1, 2, 3):
                await broker.publish(Destination.list(jobs), n)

            async def settled() -> bool:
                dead_letters = await redis.execute("LLEN", dead)  # a list's dead letters: a list
                held = await redis.execute("LLEN", processing_key(jobs, "c1"))
                return bool(dead_letters == 1 and held == 0)

            await eventually(settled, within=20, what="the dead letter, nothing held")
        assert await redis.execute("LLEN", jobs) == 0
        assert await redis.execute("ZCARD", delay_key(jobs)) == 0
        # Only the acknowledged deliveries' segments ran (1 and 3), each with its own LREM.
        assert await redis.execute("GET", total) == b"2"
    assert sorted(seen) == [(1, 1), (2, 1), (2, 2), (2, 3), (3, 1)]


@pytest.mark.parametrize("reliable", [True, False], ids=["reliable", "simple"])
@pytest.mark.parametrize("jobs", ["a}b", "x{}y", "{}", "}{", "{a}b{c}"])
async def test_retry_after_on_a_list_whose_braces_make_no_tag_is_scheduled_and_promoted(
    redis_cluster: RedisClusterServers, jobs: str, reliable: bool
) -> None:
    # The processing list, heartbeat, consumer set and delay set are derived from the list's
    # name; the scripts that move entries between them run only if they share its slot.
    key = f"{jobs}.{'reliable' if reliable else 'simple'}"
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    seen: list[int] = []
    handled = trio.Event()

    @broker.subscriber(RedisList(key, reliable=reliable), name="handle", block=50)
    async def handle(n: int, ctx: Context) -> Outcome:
        seen.append(ctx.attempt)
        if ctx.attempt == 1:
            return retry_after(0.05)
        handled.set()
        return ack()

    async with connect(redis_cluster.url) as redis:
        await redis.execute("DEL", key)
        async with serving(app) as running:
            await broker.publish(Destination.list(key), 1)
            with trio.fail_after(20):
                await handled.wait()
            assert running.stats()["handle"].faults == 0
        assert await redis.execute("ZCARD", delay_key(key)) == 0
        assert await redis.execute("LLEN", key) == 0
    assert seen == [1, 2]
