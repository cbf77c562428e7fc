"""Failure: dead, killed, hung and misbehaving servers give typed errors promptly; reconnects
are paced; nothing is ever re-sent by the client."""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from tests.redis_servers import RedisServer
from trio_streams.redis.client import (
    ConnectionOptions,
    Redis,
    RedisConnectionError,
    RedisProtocolError,
    connect,
    open_connection,
)

from .redis_waits import blocked_clients, eventually, wait_until_blocked


async def test_server_killed_mid_read_raises_promptly(redis_server: RedisServer) -> None:
    async with connect(redis_server.url) as client, connect(redis_server.url) as observer:
        async with trio.open_nursery() as nursery:
            failures: list[BaseException] = []
            failed = trio.Event()

            async def reader() -> None:
                try:
                    await client.execute("BLMOVE", "a", "b", "LEFT", "RIGHT", 0)
                except RedisConnectionError as exc:
                    failures.append(exc)
                    failed.set()

            nursery.start_soon(reader)
            await wait_until_blocked(observer, "blmove")
            with trio.fail_after(5):  # promptly: no hang
                await trio.to_thread.run_sync(redis_server.kill)
                await failed.wait()
        (error,) = failures
        assert isinstance(error, RedisConnectionError)
        assert error.command == "BLMOVE a"
        assert error.address == redis_server.address
        assert "server closed the connection" in str(error)
        # The next command cannot connect: a typed error again, naming the server.
        with pytest.raises(RedisConnectionError, match="cannot connect"):
            await client.execute("PING")


async def test_reconnects_are_paced_by_backoff_and_recover_after_restart(
    redis_server: RedisServer, mock_clock: trio.testing.MockClock
) -> None:
    # Jump the virtual clock only when nothing at all happens for a while, so real socket
    # work (an instantly refused connect) completes before any timeout could fire.
    mock_clock.autojump_threshold = 0.2
    async with connect(redis_server.url, backoff_initial=0.1, backoff_cap=0.4) as client:
        assert await client.execute("PING") == b"PONG"
        redis_server.stop()
        start = trio.current_time()
        for _ in range(6):
            with pytest.raises(RedisConnectionError):
                await client.execute("PING")
        waited = trio.current_time() - start
        # Failures 1..5 were each followed by a wait of at least half its ceiling:
        # 0.05 + 0.1 + 0.2 + 0.2 + 0.2 (capped) -- no busy loop against a dead server.
        assert waited >= 0.75
        await trio.to_thread.run_sync(redis_server.start)
        assert await client.execute("PING") == b"PONG"


async def test_lost_connection_is_reported_and_the_command_not_resent(
    redis_server: RedisServer,
) -> None:
    async with (
        connect(redis_server.url, client_name="reader") as client,
        connect(redis_server.url) as admin,
    ):
        async with trio.open_nursery() as nursery:
            failures: list[RedisConnectionError] = []

            async def reader() -> None:
                try:
                    await client.execute("BLMOVE", "jobs", "processing", "LEFT", "RIGHT", 0)
                except RedisConnectionError as exc:
                    failures.append(exc)

            nursery.start_soon(reader)
            await wait_until_blocked(admin, "blmove")
            await admin.execute("CLIENT", "KILL", "SKIPME", "YES", "USER", "default")
        assert len(failures) == 1
        # The client did not quietly block again: a job pushed now stays queued.
        assert await blocked_clients(admin, "blmove") == []
        await admin.execute("LPUSH", "jobs", "j1")
        assert await admin.execute("LLEN", "jobs") == 1
        assert await admin.execute("LLEN", "processing") == 0


async def test_hung_server_is_bounded_by_the_callers_timeout_and_runs_the_command_once(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url) as client:
        assert isinstance(client, Redis)
        await client.execute("PING")
        redis_server.pause()
        try:
            with pytest.raises(trio.TooSlowError):
                with trio.fail_after(0.3):
                    await client.execute("INCR", "counter")
            assert client.pool.idle_count == 0  # the half-read connection is gone
        finally:
            redis_server.resume()

        # The INCR already sent ran once; the client did not send it again.
        async def counted() -> bool:
            return await client.execute("GET", "counter") is not None

        await eventually(counted, what="the INCR sent before the pause to run")
        assert await client.execute("GET", "counter") == b"1"


async def test_garbage_from_the_server_is_a_protocol_error() -> None:
    async def garbage_server(stream: trio.SocketStream) -> None:
        await stream.receive_some()
        await stream.send_all(b"@what is this\r\n")
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            partial(trio.serve_tcp, garbage_server, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        with pytest.raises(RedisProtocolError, match=f"127.0.0.1:{port}") as caught:
            await open_connection(("127.0.0.1", port), ConnectionOptions())
        assert "HELLO" in str(caught.value)
        nursery.cancel_scope.cancel()


async def test_server_closing_during_handshake_is_a_connection_error() -> None:
    async def closing_server(stream: trio.SocketStream) -> None:
        await stream.aclose()

    async with trio.open_nursery() as nursery:
        (listener,) = await nursery.start(
            partial(trio.serve_tcp, closing_server, 0, host="127.0.0.1")
        )
        port = listener.socket.getsockname()[1]
        with pytest.raises(RedisConnectionError, match="closed the connection"):
            await open_connection(("127.0.0.1", port), ConnectionOptions())
        nursery.cancel_scope.cancel()
