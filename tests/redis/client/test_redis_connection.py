"""Connecting and running commands against real servers: RESP3/RESP2, AUTH, TLS, db, name."""

from __future__ import annotations

import os
import socket
from typing import Any

import pytest
import trio

from tests.redis_servers import (
    ACL_PASSWORD,
    ACL_USER,
    ADMIN_PASSWORD,
    RedisServer,
    redis_server,
)
from trio_streams.redis.client import (
    AuthenticationError,
    ConnectionOptions,
    ExecAbortError,
    NoPermissionError,
    RedisClient,
    RedisConnectionError,
    ReplyError,
    WatchError,
    connect,
    open_connection,
)


async def test_resp3_is_negotiated_and_replies_are_typed(redis: RedisClient) -> None:
    assert await redis.execute("SET", "k", "v") == b"OK"
    assert await redis.execute("GET", "k") == b"v"
    assert await redis.execute("GET", "missing") is None
    await redis.execute("HSET", "h", "f", 1)
    assert await redis.execute("HGETALL", "h") == {b"f": b"1"}  # a RESP3 map
    async with redis.connection() as connection:
        assert connection.protocol == 3


async def test_error_reply_names_command_and_server(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    await redis.execute("SET", "k", "v")
    with pytest.raises(ReplyError, match="WRONGTYPE") as caught:
        await redis.execute("LPUSH", "k", "x")
    assert caught.value.command == "LPUSH k"
    assert caught.value.address == redis_server.address
    assert f"on redis 127.0.0.1:{redis_server.port}" in str(caught.value)
    # The connection stays usable after an error reply.
    assert await redis.execute("GET", "k") == b"v"


async def test_pipeline_replies_in_order_with_errors_in_place(redis: RedisClient) -> None:
    replies = await (
        redis.pipeline()
        .add("SET", "s", "1")
        .add("LPUSH", "s", "x")  # wrong type: error in place
        .add("INCR", "s")
        .add("GET", "s")
        .execute()
    )
    assert replies[0] == b"OK"
    assert isinstance(replies[1], ReplyError)
    assert replies[1].command == "LPUSH s"
    assert replies[2:] == [2, b"2"]
    with pytest.raises(ReplyError, match="WRONGTYPE"):
        replies.raise_first()
    with pytest.raises(ReplyError, match="WRONGTYPE"):
        await redis.pipeline().add("LPUSH", "s", "x").execute(raise_on_error=True)
    assert await redis.pipeline().execute() == []


async def test_pipeline_leaves_in_one_write(
    redis_server: RedisServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    connection = await open_connection(redis_server.address, ConnectionOptions())
    fd = connection._socket.fileno()
    writes: list[int] = []
    original = os.write

    def counting_write(to: int, data: Any) -> int:
        if to == fd:
            writes.append(len(data))
        return original(to, data)

    monkeypatch.setattr(os, "write", counting_write)
    replies = await connection.execute_many([("INCR", "n")] * 500)
    await connection.aclose()
    assert replies == list(range(1, 501))
    assert len(writes) == 1


async def test_transaction_runs_atomically_and_reports_aborts(redis: RedisClient) -> None:
    replies = await redis.transaction().add("INCR", "t").add("INCR", "t").execute()
    assert replies == [1, 2]
    # A runtime error inside EXEC stays in place; Redis has no rollback.
    await redis.execute("SET", "str", "x")
    replies = await redis.transaction().add("INCR", "t").add("LPUSH", "str", "x").execute()
    assert replies[0] == 3
    assert isinstance(replies[1], ReplyError)
    # A command rejected while queueing aborts the whole block: nothing runs.
    with pytest.raises(ExecAbortError) as caught:
        await redis.transaction().add("INCR", "t").add("NOSUCHCOMMAND").execute()
    assert "unknown command" in caught.value.errors[0].message
    assert await redis.execute("GET", "t") == b"3"


async def test_watch_on_a_leased_connection(redis: RedisClient) -> None:
    async with redis.connection() as connection:
        await connection.execute("WATCH", "w")
        await redis.execute("SET", "w", "changed")  # another connection changes it
        with pytest.raises(WatchError, match="watched key changed"):
            await connection.execute_transaction([("SET", "w", "mine")])
        assert await redis.execute("GET", "w") == b"changed"
        await connection.execute("WATCH", "w")  # unchanged this time: it runs
        assert await connection.execute_transaction([("SET", "w", "mine")]) == [b"OK"]
    assert await redis.execute("GET", "w") == b"mine"


async def test_database_and_client_name(redis_server: RedisServer) -> None:
    async with connect(redis_server.url + "/2", client_name="orders-worker") as client:
        await client.execute("SET", "in-two", 1)
        assert await client.execute("CLIENT", "GETNAME") == b"orders-worker"
    async with connect(redis_server.url) as client:
        assert await client.execute("EXISTS", "in-two") == 0
    async with connect(redis_server.url, db=2) as client:
        assert await client.execute("EXISTS", "in-two") == 1


async def test_resp2_fallback_when_the_server_has_no_hello() -> None:
    with redis_server("--rename-command", "HELLO", "") as server:
        async with connect(server.url, client_name="old", db=1) as client:
            await client.execute("HSET", "h", "f", "v")
            assert await client.execute("HGETALL", "h") == [b"f", b"v"]  # RESP2 array
            assert await client.execute("CLIENT", "GETNAME") == b"old"
            async with client.connection() as connection:
                assert connection.protocol == 2


async def test_resp2_can_be_forced(redis_server: RedisServer) -> None:
    async with connect(redis_server.url, protocol=2) as client, client.connection() as conn:
        assert conn.protocol == 2
        assert await conn.execute("PING") == b"PONG"


async def test_acl_user_authenticates_and_is_limited(acl_redis_server: RedisServer) -> None:
    url = f"redis://{ACL_USER}:{ACL_PASSWORD}@127.0.0.1:{acl_redis_server.port}"
    async with connect(url, client_name="acl") as client:
        assert await client.execute("ACL", "WHOAMI") == ACL_USER.encode()
        await client.execute("SET", "app:x", 1)
        with pytest.raises(NoPermissionError, match="NOPERM") as caught:
            await client.execute("SET", "other:x", 1)
        assert caught.value.command == "SET other:x"
        with pytest.raises(NoPermissionError):
            await client.execute("FLUSHALL")
    for protocol in (3, 2):
        async with connect(url, protocol=protocol) as client:
            assert await client.execute("GET", "app:x") == b"1"


async def test_wrong_password_is_an_authentication_error(acl_redis_server: RedisServer) -> None:
    url = f"redis://{ACL_USER}:wrong@127.0.0.1:{acl_redis_server.port}"
    for protocol in (3, 2):
        async with connect(url, protocol=protocol) as client:
            with pytest.raises(AuthenticationError, match="WRONGPASS"):
                await client.execute("PING")
    async with connect(f"redis://127.0.0.1:{acl_redis_server.port}") as client:
        with pytest.raises(AuthenticationError, match="NOAUTH"):
            await client.execute("GET", "app:x")
    async with connect(f"redis://{ADMIN_PASSWORD}@127.0.0.1:{acl_redis_server.port}") as client:
        assert await client.execute("ACL", "WHOAMI") == b"default"


async def test_tls_with_ca_and_client_certificate(tls_redis_server: RedisServer) -> None:
    async with connect(tls_redis_server.url, client_name="tls") as client:
        assert await client.execute("PING") == b"PONG"
        assert await client.execute("CLIENT", "GETNAME") == b"tls"
        replies = await client.pipeline().add("INCR", "n").add("INCR", "n").execute()
        assert replies == [1, 2]


async def test_tls_refusals_are_connection_errors(tls_redis_server: RedisServer) -> None:
    tls = tls_redis_server.tls
    assert tls is not None
    port = tls_redis_server.port
    # The server requires a client certificate.
    async with connect(f"rediss://127.0.0.1:{port}?ssl_ca_certs={tls.ca}") as client:
        with pytest.raises(RedisConnectionError, match=f"127.0.0.1:{port}"):
            await client.execute("PING")
    # The server's certificate is not signed by a CA the client trusts.
    async with connect(
        f"rediss://127.0.0.1:{port}?ssl_certfile={tls.client_cert}&ssl_keyfile={tls.client_key}"
    ) as client:
        with pytest.raises(RedisConnectionError, match="CERTIFICATE_VERIFY_FAILED"):
            await client.execute("PING")
    # Plain TCP to a TLS port: the server closes it at the first command, which says so.
    async with connect(f"redis://127.0.0.1:{port}", connect_timeout=1.0) as client:
        with pytest.raises(RedisConnectionError, match="may require TLS"):
            await client.execute("PING")


async def test_connection_refused_names_the_server(redis_server: RedisServer) -> None:
    redis_server.stop()
    async with connect(redis_server.url) as client:
        with pytest.raises(RedisConnectionError, match=f"127.0.0.1:{redis_server.port}"):
            await client.execute("PING")


async def test_one_connection_serves_one_task_at_a_time(redis_server: RedisServer) -> None:
    connection = await open_connection(redis_server.address, ConnectionOptions())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(connection.execute, "BLPOP", "nothing", 0)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(trio.BusyResourceError):
            await connection.execute("PING")
        nursery.cancel_scope.cancel()
    assert connection.broken  # the blocked BLPOP was cancelled with its reply outstanding
    await connection.aclose()


async def test_pipeline_mixes_commands_and_transaction_blocks(redis: RedisClient) -> None:
    await redis.execute("SET", "str", "x")
    replies = await (
        redis.pipeline()
        .add("INCR", "plain")
        .add_transaction([("INCRBY", "total", 5), ("XADD", "log", "*", "n", 1)])
        .add_transaction([("INCR", "total"), ("NOSUCHCOMMAND",)])  # rejected whole
        .add_transaction([("INCR", "total"), ("LPUSH", "str", "x")])  # runs; error in place
        .add("GET", "total")
        .execute()
    )
    assert replies[0] == 1
    assert replies[1][0] == 5
    assert isinstance(replies[2], ExecAbortError)  # in place: none of that block ran
    assert replies[3][0] == 6
    assert isinstance(replies[3][1], ReplyError)
    assert replies[4] == b"6"
    with pytest.raises(ExecAbortError):
        replies.raise_first()


async def test_attribute_frame_from_the_server_is_not_taken_for_a_reply() -> None:
    # DEBUG PROTOCOL attrib makes Redis 7 send an attribute frame before its reply (RESP3).
    with redis_server("--enable-debug-command", "yes") as server:
        async with connect(server.url, pool_size=1) as client:
            attributed = b"Some real reply following the attribute"
            assert await client.execute("DEBUG", "PROTOCOL", "attrib") == attributed
            assert await client.execute("PING") == b"PONG"  # nothing shifted
            replies = await (
                client.pipeline()
                .add("DEBUG", "PROTOCOL", "attrib")
                .add("ECHO", "between")
                .add("DEBUG", "PROTOCOL", "attrib")
                .execute()
            )
            assert replies == [attributed, b"between", attributed]
            assert await client.execute("ECHO", "last") == b"last"
            async with client.connection() as connection:
                assert connection.protocol == 3
                assert not connection.broken


async def test_connections_have_tcp_keepalive_on(redis_server: RedisServer) -> None:
    connection = await open_connection(redis_server.address, ConnectionOptions())
    try:
        sock = connection._socket
        assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_KEEPIDLE"):
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE) == 30
            assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT) == 3
    finally:
        connection.close()
