"""The optional command timeout: off by default (Trio's cancel scopes own timeouts); when set,
a command without a reply in time raises RedisTimeoutError and its connection is discarded,
while blocking commands get their own block time on top of it (and wait forever if asked)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tests.redis_servers import RedisServer
from trio_streams.redis.client import (
    Redis,
    RedisConnectionError,
    RedisTimeoutError,
    connect,
)

from .redis_waits import eventually, wait_until_blocked


async def test_a_command_without_a_reply_in_time_raises_and_its_connection_is_discarded(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url, command_timeout=0.3) as client:
        assert isinstance(client, Redis)
        async with client.connection(), client.connection(), client.connection():
            pass  # three idle connections, open before the server hangs
        assert client.pool.idle_count == 3
        redis_server.pause()
        try:
            with trio.fail_after(10):  # a bound for the test, far above the option
                with pytest.raises(RedisTimeoutError, match=r"no reply within 0\.3s") as caught:
                    await client.execute("INCR", "counter")
                assert isinstance(caught.value, RedisConnectionError)  # outcome unknown
                assert caught.value.command == "INCR counter"
                assert caught.value.address == redis_server.address
                # That connection is dropped (never pooled half-read); the others stay.
                assert client.pool.idle_count == 2 and client.pool.in_use == 0
                with pytest.raises(RedisTimeoutError):
                    await client.pipeline().add("INCR", "counter").add("GET", "x").execute()
                with pytest.raises(RedisTimeoutError):
                    async with client.connection() as connection:
                        await connection.execute("GET", "x")
                assert connection.broken
                assert client.pool.idle_count == 0
        finally:
            redis_server.resume()

        async def incremented() -> bool:
            return await client.execute("GET", "counter") is not None

        await eventually(incremented, what="the INCRs sent before the pause to run")
        assert await client.execute("GET", "counter") == b"2"  # each ran once: never re-sent


async def test_blocking_commands_get_their_block_time_on_top_of_the_command_timeout(
    redis_server: RedisServer,
) -> None:
    # Each read blocks 2s on the server, twice the command timeout: cut by it alone they
    # would fail at 1s; with their block time added they are bounded at 3s and return empty.
    async with connect(redis_server.url, command_timeout=1.0) as client:
        await client.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        replies: dict[str, object] = {}

        async def run(name: str, *args: object) -> None:
            async with client.dedicated_connection() as connection:
                replies[name] = await connection.execute(*args)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(run, "blpop", "BLPOP", "q", 2)
                nursery.start_soon(run, "blmove", "BLMOVE", "q", "d", "LEFT", "RIGHT", 2.0)
                nursery.start_soon(run, "blmpop", "BLMPOP", 2, 1, "q", "LEFT")
                nursery.start_soon(run, "xread", "XREAD", "BLOCK", 2000, "STREAMS", "s", "$")
                nursery.start_soon(
                    run, "xreadgroup", "XREADGROUP", "GROUP", "g", "c", "BLOCK", 2000,
                    "STREAMS", "s", ">",
                )  # fmt: skip
        assert replies == dict.fromkeys(["blpop", "blmove", "blmpop", "xread", "xreadgroup"])


async def test_a_blocking_command_that_may_wait_forever_is_not_cut_by_the_command_timeout(
    redis_server: RedisServer, mock_clock: trio.testing.MockClock
) -> None:
    # The virtual clock jumps whenever everything waits, so a wrongly applied timeout would
    # fire at once; the server's own blocking (timeout 0) does not depend on that clock.
    mock_clock.autojump_threshold = 0.2
    async with (
        connect(redis_server.url, command_timeout=5) as client,
        connect(redis_server.url) as observer,
    ):
        got: list[object] = []

        async def reader() -> None:
            async with client.dedicated_connection() as connection:
                got.append(await connection.execute("BLPOP", "jobs", 0))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            await wait_until_blocked(observer, "blpop")
            await trio.sleep(3600)  # an hour of virtual time: far past the command timeout
            await wait_until_blocked(observer, "blpop")  # still waiting
            await observer.execute("RPUSH", "jobs", "job-1")
        assert got == [[b"jobs", b"job-1"]]


async def test_without_a_command_timeout_a_hung_server_is_bounded_by_the_callers_scope(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url) as client:
        assert isinstance(client, Redis)
        assert client.config.connection.command_timeout is None
        await client.execute("PING")
        redis_server.pause()
        try:
            with trio.move_on_after(0.3) as scope:
                await client.execute("PING")
            assert scope.cancelled_caught  # no timeout of the client's own: Trio's
            assert client.pool.idle_count == 0
        finally:
            redis_server.resume()
