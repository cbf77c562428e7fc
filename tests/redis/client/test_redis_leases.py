"""Leased connections never carry session state to their next user: a lease left with a
WATCH or a MULTI is reset, one that ends by an exception or a cancellation is closed, and
commands that would change the connection's mode are refused at the call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from tests.redis_servers import RedisServer
from trio_streams.redis.client import (
    CommandNotAllowedError,
    Redis,
    RedisClient,
    connect,
)

from .redis_waits import wait_until_blocked, wait_until_no_blocked_client


@pytest.mark.parametrize("protocol", [3, 2])
async def test_a_watch_left_early_does_not_fail_a_later_transaction(
    redis_server: RedisServer, protocol: int
) -> None:
    async with (
        connect(redis_server.url, pool_size=1, protocol=protocol) as client,
        connect(redis_server.url) as other,
    ):
        async with client.connection() as connection:
            await connection.execute("WATCH", "stock")
            assert await connection.execute("GET", "stock") is None
            leased = connection  # the documented recipe, left early: nothing to do
        await other.execute("SET", "stock", 5)  # the key the early leaver watched changes
        async with client.connection() as connection:
            assert connection is leased  # reset, not closed: the same connection serves
            assert await connection.execute_transaction([("SET", "unrelated", 1)]) == [b"OK"]
        assert await client.transaction().add("INCR", "n").execute() == [1]


@pytest.mark.parametrize("protocol", [3, 2])
async def test_a_multi_left_open_does_not_queue_the_next_command(
    redis_server: RedisServer, protocol: int
) -> None:
    async with connect(redis_server.url, pool_size=1, protocol=protocol) as client:
        await client.execute("SET", "k", "v")
        async with client.connection() as connection:
            assert await connection.execute("MULTI") == b"OK"
            assert await connection.execute("SET", "k", "queued") == b"QUEUED"
        assert await client.execute("GET", "k") == b"v"  # the queued SET never ran
        # The same through a one-shot pipeline: the connection is not kept.
        await client.pipeline().add("MULTI").add("SET", "k", "queued").execute()
        assert await client.execute("GET", "k") == b"v"


async def test_a_lease_that_ends_by_an_exception_closes_its_connection(
    redis: RedisClient,
) -> None:
    assert isinstance(redis, Redis)
    try:
        async with redis.connection() as connection:
            await connection.execute("PING")
            raise ValueError("handler bug")
    except ValueError:
        pass
    assert connection.broken
    assert redis.pool.idle_count == 0
    with trio.move_on_after(0.05):
        async with redis.connection() as connection:
            await trio.sleep_forever()
    assert connection.broken
    assert redis.pool.idle_count == 0 and redis.pool.in_use == 0


@pytest.mark.parametrize("protocol", [3, 2])
async def test_a_cancelled_low_level_read_on_a_lease_does_not_hand_its_reply_to_the_next_caller(
    redis_server: RedisServer, protocol: int
) -> None:
    async with (
        connect(redis_server.url, pool_size=1, protocol=protocol) as client,
        connect(redis_server.url) as observer,
    ):
        async with client.connection() as connection:
            await connection.send_raw(b"*3\r\n$5\r\nBLPOP\r\n$4\r\njobs\r\n$1\r\n0\r\n")
            await wait_until_blocked(observer, "blpop")
            with trio.move_on_after(0.05):
                await connection.read_frame()  # cancelled inside the lease; exits normally
        await wait_until_no_blocked_client(observer, "blpop")  # the lease closed it
        await observer.execute("RPUSH", "jobs", "job-1")
        await observer.execute("SET", "greeting", "hello")
        assert await client.execute("GET", "greeting") == b"hello"
        assert await observer.execute("LRANGE", "jobs", 0, -1) == [b"job-1"]


REFUSED = [
    ("SUBSCRIBE", "news"),
    ("PSUBSCRIBE", "news.*"),
    ("SSUBSCRIBE", "news"),
    ("UNSUBSCRIBE",),
    ("MONITOR",),
    ("RESET",),
    ("HELLO", 3),
    ("SELECT", 1),
    ("select", 1),
    (b"Select", 1),
    ("QUIT",),
    ("AUTH", "secret"),
    ("CLIENT", "REPLY", "OFF"),
    ("client", "tracking", "on"),
]


def calls(client: RedisClient) -> dict[str, Callable[[tuple[Any, ...]], Awaitable[object]]]:
    """Every way a command reaches a connection."""

    async def execute(args: tuple[Any, ...]) -> object:
        return await client.execute(*args)

    async def pipeline(args: tuple[Any, ...]) -> object:
        return await client.pipeline().add("PING").add(*args).execute()

    async def transaction(args: tuple[Any, ...]) -> object:
        return await client.transaction().add(*args).execute()

    async def lease(args: tuple[Any, ...]) -> object:
        async with client.connection() as connection:
            return await connection.execute(*args)

    async def lease_many(args: tuple[Any, ...]) -> object:
        async with client.connection() as connection:
            return await connection.execute_many([("PING",), args])

    async def dedicated(args: tuple[Any, ...]) -> object:
        async with client.dedicated_connection() as connection:
            return await connection.execute(*args)

    return {
        "execute": execute,
        "pipeline": pipeline,
        "transaction": transaction,
        "lease": lease,
        "lease_many": lease_many,
        "dedicated": dedicated,
    }


@pytest.mark.parametrize("protocol", [3, 2])
async def test_commands_that_change_the_connections_mode_are_refused_at_the_call(
    redis_server: RedisServer, protocol: int
) -> None:
    async with (
        connect(redis_server.url, pool_size=1, protocol=protocol) as client,
        connect(redis_server.url) as observer,
    ):
        await client.execute("SET", "where", "db0")
        await observer.execute("PING")
        for name, call in calls(client).items():
            for args in REFUSED:
                with trio.fail_after(5):  # never a hang
                    with pytest.raises(CommandNotAllowedError, match="not allowed") as caught:
                        await call(args)
                refused = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
                assert refused.upper() in str(caught.value), (name, args)
        # Nothing was sent: the server saw none of them, and the pool still serves db 0.
        assert await client.execute("GET", "where") == b"db0"
        stats = (await observer.execute("INFO", "commandstats")).decode()
        for refused in ("subscribe", "select", "monitor", "reset", "quit", "auth"):
            assert f"cmdstat_{refused}:" not in stats
        assert await client.execute("PING") == b"PONG"
