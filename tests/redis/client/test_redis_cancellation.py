"""Cancellation: a command cancelled with its reply outstanding never leaves a half-read
connection behind, and a cancelled blocking read leaves no blocked client and loses no entry."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from tests.redis_servers import RedisServer
from trio_streams.redis.client import Redis, RedisClient, connect

from .redis_waits import blocked_clients, wait_until_blocked, wait_until_no_blocked_client


async def test_cancelled_command_breaks_and_discards_its_connection(redis: RedisClient) -> None:
    assert isinstance(redis, Redis)
    with trio.move_on_after(0.2) as scope:
        await redis.execute("BLMOVE", "src", "dst", "LEFT", "RIGHT", 0)
    assert scope.cancelled_caught
    assert redis.pool.idle_count == 0  # closed, not returned half-read
    assert redis.pool.in_use == 0
    assert await redis.execute("PING") == b"PONG"
    assert redis.pool.idle_count == 1


async def test_a_command_in_a_cancelled_scope_is_never_sent_though_a_connection_is_idle(
    redis: RedisClient,
) -> None:
    assert isinstance(redis, Redis)
    await redis.execute("PING")
    assert redis.pool.idle_count == 1  # one ready to go, no connect to wait for
    with trio.CancelScope() as scope:
        scope.cancel()
        await redis.execute("SET", "sent", "1")
    assert scope.cancelled_caught
    assert await redis.execute("EXISTS", "sent") == 0
    assert redis.pool.idle_count == 1 and redis.pool.in_use == 0  # nothing checked out


@pytest.mark.parametrize("protocol", [3, 2])
async def test_cancelled_blmove_leaves_no_blocked_client_and_loses_no_element(
    redis_server: RedisServer, protocol: int
) -> None:
    async with (
        connect(redis_server.url, protocol=protocol) as client,
        connect(redis_server.url) as observer,
    ):
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                await client.execute("BLMOVE", "jobs", "processing", "LEFT", "RIGHT", 0)

            nursery.start_soon(reader)
            await wait_until_blocked(observer, "blmove")
            nursery.cancel_scope.cancel()
        await wait_until_no_blocked_client(observer, "blmove")
        # Nothing is blocked any more, so a pushed job stays where a later reader finds it.
        await observer.execute("LPUSH", "jobs", "job-1")
        assert await observer.execute("LRANGE", "jobs", 0, -1) == [b"job-1"]

        # Race a push against cancellation many times: the element is always either still
        # queued or in the processing list (never popped into a closed socket and lost).
        for attempt in range(20):
            await observer.execute("DEL", "jobs", "processing")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(
                    client.execute, "BLMOVE", "jobs", "processing", "LEFT", "RIGHT", 0
                )
                await wait_until_blocked(observer, "blmove")
                await observer.execute("LPUSH", "jobs", f"race-{attempt}")
                nursery.cancel_scope.cancel()
            await wait_until_no_blocked_client(observer, "blmove")
            queued = await observer.execute("LRANGE", "jobs", 0, -1)
            moved = await observer.execute("LRANGE", "processing", 0, -1)
            assert queued + moved == [f"race-{attempt}".encode()]


async def test_cancelled_xreadgroup_block_leaves_no_blocked_client_and_loses_no_entry(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url) as client, connect(redis_server.url) as observer:
        await observer.execute("XGROUP", "CREATE", "orders", "workers", "$", "MKSTREAM")
        delivered: list[Any] = []
        ids: list[bytes] = []
        for attempt in range(20):
            async with trio.open_nursery() as nursery:

                async def reader() -> None:
                    reply = await client.execute(
                        "XREADGROUP", "GROUP", "workers", "c1", "COUNT", 10,
                        "BLOCK", 0, "STREAMS", "orders", ">",
                    )  # fmt: skip
                    delivered.append(reply)

                nursery.start_soon(reader)
                await wait_until_blocked(observer, "xreadgroup")
                if attempt % 2:  # half the time an entry races the cancellation
                    ids.append(await observer.execute("XADD", "orders", "*", "n", attempt))
                nursery.cancel_scope.cancel()
            await wait_until_no_blocked_client(observer, "xreadgroup")
        # Every entry was either delivered to the reader, or is pending for c1 (the server
        # delivered it into the closed connection), or is still undelivered: never lost.
        pending = await observer.execute("XPENDING", "orders", "workers", "-", "+", 100)
        pending_ids = {entry[0] for entry in pending}
        rest = await observer.execute(
            "XREADGROUP", "GROUP", "workers", "c2", "COUNT", 100, "STREAMS", "orders", ">"
        )
        undelivered = {entry[0] for entry in rest[b"orders"]} if rest else set()
        delivered_ids = {e[0] for reply in delivered if reply for e in reply[b"orders"]}
        assert delivered_ids <= pending_ids  # read but not acknowledged: still pending
        assert pending_ids | undelivered == set(ids)
        assert not (pending_ids & undelivered)
        assert not await blocked_clients(observer, "xreadgroup")


async def test_dedicated_connection_for_a_blocking_read_holds_no_pool_slot(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url, pool_size=1) as client:
        assert isinstance(client, Redis)
        async with trio.open_nursery() as nursery:

            async def blocking_reader() -> None:
                async with client.dedicated_connection() as connection:
                    await connection.execute("BLMOVE", "a", "b", "LEFT", "RIGHT", 0)

            nursery.start_soon(blocking_reader)
            await trio.testing.wait_all_tasks_blocked()
            # The only pooled connection is free for ordinary commands meanwhile.
            assert await client.execute("PING") == b"PONG"
            assert client.pool.in_use == 0
            nursery.cancel_scope.cancel()
        await wait_until_no_blocked_client(client, "blmove")


async def test_cancelled_pipeline_is_not_half_read(redis: RedisClient) -> None:
    assert isinstance(redis, Redis)
    pipeline = redis.pipeline().add("INCR", "p").add("BLPOP", "never", 0).add("INCR", "p")
    with trio.move_on_after(0.2):
        await pipeline.execute()
    assert redis.pool.idle_count == 0
    # The first INCR ran; the second waits behind the BLPOP on a connection now closed,
    # so it never runs: the client did not re-send anything.
    assert await redis.execute("GET", "p") == b"1"
