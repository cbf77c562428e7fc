"""Every way of connecting is paced, and handshake refusals are typed: retryable ones
(max clients, loading) are connection errors paced by the backoff; configuration refusals
(wrong password, NOPERM, bad database) are raised at once as configuration errors."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

import pytest
import trio

from tests.redis_servers import (
    ACL_USER,
    ADMIN_PASSWORD,
    RedisClusterServers,
    RedisServer,
    command,
    redis_server,
)
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis.client import (
    AuthenticationError,
    ConnectionSetupError,
    HandshakeError,
    RedisClient,
    RedisConnectionError,
    RedisError,
    connect,
)

from .redis_waits import eventually

#: The measured window, and generous bounds for it on a loaded 2-core machine: an unpaced
#: loop makes tens of thousands of attempts and burns the whole window in CPU.
WINDOW = 2.0
MAX_ATTEMPTS = 200
MAX_CPU = 1.0


async def retry_for_a_window(
    attempt: Callable[[], Awaitable[object]],
) -> tuple[int, float, list[RedisError]]:
    """Run ``attempt`` in a retry loop (catching every client error) for :data:`WINDOW`
    seconds; return the attempts made, the CPU seconds used and the errors seen."""
    attempts = 0
    errors: list[RedisError] = []
    cpu = time.process_time()
    with trio.move_on_after(WINDOW):
        while True:
            attempts += 1
            try:
                await attempt()
            except RedisError as exc:
                errors.append(exc)
    return attempts, time.process_time() - cpu, errors


def dedicated_read(client: RedisClient) -> Callable[[], Awaitable[object]]:
    async def attempt() -> None:
        async with client.dedicated_connection() as connection:
            await connection.execute("BLPOP", "jobs", 0)

    return attempt


def subscription(client: RedisClient) -> Callable[[], Awaitable[object]]:
    async def attempt() -> None:
        async with client.subscribe(["news"]) as sub:
            await sub.__anext__()

    return attempt


def pooled_command(client: RedisClient) -> Callable[[], Awaitable[object]]:
    async def attempt() -> None:
        await client.execute("PING")

    return attempt


@pytest.mark.parametrize("path", [dedicated_read, subscription, pooled_command])
async def test_a_retry_loop_against_a_killed_server_is_paced_on_every_connecting_path(
    redis_server: RedisServer, path: Callable[[RedisClient], Callable[[], Awaitable[object]]]
) -> None:
    async with connect(redis_server.url) as client:
        assert await client.execute("PING") == b"PONG"
        redis_server.kill()
        attempts, cpu, errors = await retry_for_a_window(path(client))
    assert errors and all(isinstance(e, RedisConnectionError) for e in errors)
    assert attempts < MAX_ATTEMPTS, f"{attempts} connect attempts in {WINDOW}s"
    assert cpu < MAX_CPU, f"{cpu:.2f}s of CPU in {WINDOW}s"


async def test_dedicated_connections_and_the_pool_share_one_backoff(
    redis_server: RedisServer,
) -> None:
    # A failure seen through dedicated_connection delays the pool's next connect too: the
    # pacing belongs to the server, not to the call.
    async with connect(redis_server.url, backoff_initial=60, backoff_cap=60) as client:
        redis_server.stop()
        with pytest.raises(RedisConnectionError):
            async with client.dedicated_connection():
                pass
        with trio.move_on_after(1) as waited:
            await client.execute("PING")  # waits out the backoff (30 to 60s) before trying
        assert waited.cancelled_caught


@pytest.mark.parametrize("db", [0, 1])
async def test_max_clients_is_a_retryable_handshake_error_and_retries_are_paced(
    db: int,
) -> None:
    with redis_server("--maxclients", "1") as server:
        async with connect(server.url) as holder, connect(server.url, db=db) as client:
            async with holder.connection() as held:  # the one client the server allows
                await held.execute("PING")
                attempts, cpu, errors = await retry_for_a_window(pooled_command(client))
            assert errors and all(isinstance(e, HandshakeError) for e in errors)
            assert "max number of clients reached" in str(errors[0])
            assert attempts < MAX_ATTEMPTS, f"{attempts} connect attempts in {WINDOW}s"
            assert cpu < MAX_CPU, f"{cpu:.2f}s of CPU in {WINDOW}s"
            await holder.aclose()  # frees the server's one client slot

            async def served() -> bool:
                try:
                    return bool(await client.execute("PING") == b"PONG")
                except HandshakeError:
                    return False

            await eventually(served, within=10, what="the freed client slot to be usable")


@pytest.mark.slow
async def test_a_server_loading_its_dataset_is_a_retryable_handshake_error() -> None:
    with redis_server("--enable-debug-command", "yes") as server:
        # About two seconds of loading: 20000 keys, 100us each, events served every 1 KiB.
        server.command("DEBUG", "POPULATE", 20000)
        server.command("CONFIG", "SET", "key-load-delay", 100)
        server.command("CONFIG", "SET", "loading-process-events-interval-bytes", 1024)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                trio.to_thread.run_sync,
                lambda: command(server.address, "DEBUG", "RELOAD", timeout=60),
            )

            def loading() -> bool:
                return b"loading:1" in server.command("INFO", "persistence")

            async def is_loading() -> bool:
                return await trio.to_thread.run_sync(loading)

            await eventually(is_loading, within=10, what="the server to start loading")
            async with connect(server.url) as client:
                with pytest.raises(HandshakeError, match="LOADING") as caught:
                    await client.execute("GET", "key:1")
                assert isinstance(caught.value, RedisConnectionError)
                # Retrying is paced and succeeds once the dataset is loaded.
                with trio.fail_after(30):
                    while True:
                        try:
                            assert await client.execute("GET", "key:1") == b"value:1"
                            break
                        except HandshakeError:
                            continue


async def test_configuration_refusals_are_raised_at_once_as_configuration_errors(
    acl_redis_server: RedisServer,
) -> None:
    port = acl_redis_server.port
    async with connect(f"redis://{ACL_USER}:wrong@127.0.0.1:{port}") as client:
        with pytest.raises(AuthenticationError, match="WRONGPASS") as wrong:
            await client.execute("PING")
    assert isinstance(wrong.value, ConnectionSetupError)
    assert isinstance(wrong.value, ConfigurationError)
    assert not isinstance(wrong.value, RedisConnectionError)  # not retryable
    assert "check the user name and password" in str(wrong.value)

    async with connect(f"redis://{ADMIN_PASSWORD}@127.0.0.1:{port}/99") as client:
        with pytest.raises(ConnectionSetupError, match="DB index is out of range") as bad_db:
            await client.execute("PING")
    assert bad_db.value.command == "SELECT 99"
    assert not isinstance(bad_db.value, RedisConnectionError)


@pytest.mark.parametrize(("protocol", "denied", "db"), [(3, "select", 1), (2, "ping", 0)])
async def test_nopermission_during_the_handshake_is_a_configuration_error(
    protocol: int, denied: str, db: int
) -> None:
    rules = ("default", "on", "nopass", "~*", "+@all", f"-{denied}")
    with redis_server("--user", *rules) as server:
        async with connect(server.url, protocol=protocol, db=db) as client:
            with pytest.raises(ConnectionSetupError, match="NOPERM") as caught:
                await client.execute("GET", "k")
        assert caught.value.code == "NOPERM"
        assert caught.value.command.startswith(denied.upper())
        assert not isinstance(caught.value, RedisConnectionError)
        assert "ACL rights" in str(caught.value)


async def test_a_retry_loop_against_a_wrong_password_is_paced_too(
    acl_redis_server: RedisServer,
) -> None:
    url = f"redis://{ACL_USER}:wrong@127.0.0.1:{acl_redis_server.port}"
    async with connect(url) as client:
        attempts, cpu, errors = await retry_for_a_window(dedicated_read(client))
    assert errors and all(isinstance(e, AuthenticationError) for e in errors)
    assert attempts < MAX_ATTEMPTS, f"{attempts} connect attempts in {WINDOW}s"
    assert cpu < MAX_CPU, f"{cpu:.2f}s of CPU in {WINDOW}s"


async def test_a_cluster_refuses_a_wrong_configuration_at_once_not_as_a_cluster_error(
    redis_cluster: RedisClusterServers,
) -> None:
    # The cluster nodes have no password: AUTH with one is refused by every node alike.
    async with connect(redis_cluster.url, password="not-needed", protocol=2) as client:
        with pytest.raises(ConnectionSetupError, match="AUTH") as caught:
            await client.execute("GET", "{pacing}:k")
    assert not isinstance(caught.value, RedisConnectionError)
