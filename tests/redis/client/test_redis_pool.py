"""The bounded per-node pool: waiting, timeouts, and what is never handed out again."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tests.redis_servers import RedisServer
from trio_streams.redis.client import PoolTimeoutError, Redis, connect

from .redis_waits import eventually


async def test_callers_beyond_the_bound_wait_their_turn(redis_server: RedisServer) -> None:
    async with connect(redis_server.url, pool_size=2) as client:
        assert isinstance(client, Redis)
        order: list[str] = []
        first = await client.pool.acquire()
        second = await client.pool.acquire()
        assert first is not second
        assert client.pool.in_use == 2
        async with trio.open_nursery() as nursery:

            async def waiter(name: str) -> None:
                async with client.connection() as connection:
                    order.append(name)
                    await connection.execute("PING")

            nursery.start_soon(waiter, "a")
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(waiter, "b")
            await trio.testing.wait_all_tasks_blocked()
            assert order == []  # both wait: the pool is full
            client.pool.release(first)  # one slot frees: the first to wait gets it
        client.pool.release(second)
        assert order == ["a", "b"]  # served in arrival order
        assert client.pool.in_use == 0
        assert client.pool.idle_count == 2  # never more than the bound


async def test_waiting_times_out_with_a_clear_error(redis_server: RedisServer) -> None:
    async with connect(redis_server.url, pool_size=1, pool_timeout=0.1) as client:
        async with client.connection():
            with pytest.raises(PoolTimeoutError, match=r"within 0\.1s: all 1 are in use"):
                await client.execute("PING")
        assert await client.execute("PING") == b"PONG"  # the slot was not leaked


async def test_waiting_is_cancellable_and_leaks_no_slot(redis_server: RedisServer) -> None:
    async with connect(redis_server.url, pool_size=1) as client:
        assert isinstance(client, Redis)
        async with client.connection():
            with trio.move_on_after(0.05) as scope:
                await client.execute("PING")
            assert scope.cancelled_caught
        assert client.pool.in_use == 0
        assert await client.execute("PING") == b"PONG"


async def test_unexpectedly_readable_idle_connection_is_discarded(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url) as client:
        assert isinstance(client, Redis)
        async with client.connection() as connection:
            # A reply nobody will read: the connection is out of sync once released.
            await connection.send_raw(b"*1\r\n$4\r\nPING\r\n")

            async def pong_arrived() -> bool:
                return not connection.is_reusable()

            await eventually(pong_arrived, what="the unread PONG")
            stale = connection
        # Checking it out again notices the unread bytes: it is closed, a new one serves.
        assert await client.execute("ECHO", "mine") == b"mine"
        assert stale.broken
        assert client.pool.idle_count == 1


async def test_idle_connection_closed_by_the_server_is_replaced(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url, client_name="victim") as client:
        assert isinstance(client, Redis)
        await client.execute("PING")
        assert client.pool.idle_count == 1
        async with connect(redis_server.url) as admin:
            assert await admin.execute("CLIENT", "KILL", "SKIPME", "YES", "USER", "default") >= 1
        # The idle connection is now at EOF: checking it out notices and opens a new one,
        # so the command succeeds instead of failing on a dead socket.
        idle = client.pool._idle[0]

        async def closed_by_server() -> bool:
            return not idle.is_reusable()

        await eventually(closed_by_server, what="the server to close the idle connection")
        assert await client.execute("CLIENT", "GETNAME") == b"victim"
