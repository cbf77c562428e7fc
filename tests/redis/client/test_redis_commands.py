"""Commands that cannot be sent are refused at the call with a typed error naming what is
wrong: an empty command (the server would never answer it), a bool, a lone surrogate."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio

from tests.redis_servers import RedisClusterServers, RedisServer
from trio_streams.redis.client import CommandEncodingError, RedisClient, connect
from trio_streams.redis.client.protocol import pack_command


def empty_commands(client: RedisClient) -> dict[str, Callable[[], Awaitable[Any]]]:
    """Every way to hand the client an empty command."""

    async def execute() -> Any:
        return await client.execute()

    async def pipeline() -> Any:
        return await client.pipeline().add("PING").add().execute()

    async def pipeline_extend() -> Any:
        return await client.pipeline().extend([("PING",), ()]).execute()

    async def transaction() -> Any:
        return await client.transaction().add().execute()

    async def block() -> Any:
        return await client.pipeline().add_transaction([("PING",), ()]).execute()

    async def lease() -> Any:
        async with client.connection() as connection:
            return await connection.execute()

    async def lease_many() -> Any:
        async with client.connection() as connection:
            return await connection.execute_many([("PING",), ()])

    return {
        "execute": execute,
        "pipeline": pipeline,
        "pipeline_extend": pipeline_extend,
        "transaction": transaction,
        "block": block,
        "lease": lease,
        "lease_many": lease_many,
    }


async def assert_empty_commands_refused(client: RedisClient) -> None:
    for name, call in empty_commands(client).items():
        with trio.fail_after(5):  # never a hang
            with pytest.raises(CommandEncodingError, match="empty command"):
                await call()
        assert await client.execute("PING") == b"PONG", name


@pytest.mark.parametrize("protocol", [3, 2])
async def test_an_empty_command_is_refused_at_the_call_instead_of_hanging(
    redis_server: RedisServer, protocol: int
) -> None:
    async with connect(redis_server.url, protocol=protocol, pool_size=1) as client:
        await assert_empty_commands_refused(client)


async def test_an_empty_command_is_refused_by_the_cluster_client_too(
    redis_cluster: RedisClusterServers,
) -> None:
    async with connect(redis_cluster.url) as client:
        await assert_empty_commands_refused(client)


def test_a_bool_argument_is_refused_naming_its_index_and_type() -> None:
    with pytest.raises(
        CommandEncodingError, match=r"argument 2 \(a bool\) of command SET k"
    ) as caught:
        pack_command(("SET", "k", True))
    assert caught.value.index == 2
    assert "send 1/0 or a string" in str(caught.value)


def test_a_lone_surrogate_is_refused_naming_its_index_not_a_bare_unicode_error() -> None:
    with pytest.raises(CommandEncodingError, match=r"argument 3 \(a str\)") as caught:
        pack_command(("HSET", "h", "f", "bad \ud800 text"))
    assert caught.value.index == 3
    assert "not valid Unicode" in str(caught.value)
    str(caught.value).encode("utf-8")  # the message itself is printable
    # As the first argument, which the message quotes, it is escaped.
    with pytest.raises(CommandEncodingError, match=r"argument 1") as first:
        pack_command(("GET", "\udcff"))
    str(first.value).encode("utf-8")


async def test_unsendable_arguments_leave_the_pooled_connection_usable(redis: RedisClient) -> None:
    with pytest.raises(CommandEncodingError):
        await redis.execute("SET", "k", False)
    with pytest.raises(CommandEncodingError):
        await redis.pipeline().add("SET", "k", "\ud800").execute()
    assert await redis.execute("PING") == b"PONG"
