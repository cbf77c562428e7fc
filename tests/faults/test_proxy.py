"""The fault proxy's contract, sentence by sentence, through the project's own Redis client
against a real redis-server."""

from __future__ import annotations

import pytest
import trio

from trio_streams.redis.client import (
    RedisConnectionError,
    RedisError,
    RedisTimeoutError,
    connect,
)
from trio_streams.testing.faults import FaultProxy, ProxyError, issued, named
from trio_streams.testing.servers import RedisServer

#: Seconds any single step may take before the test fails instead of hanging.
STEP = 10


async def test_the_proxy_forwards_bytes_unchanged_until_told_otherwise(
    server: RedisServer, proxy: FaultProxy
) -> None:
    async with connect(proxy.url) as redis:
        await redis.execute("SET", "k", b"\x00\r\n" * 1000)
        assert await redis.execute("GET", "k") == b"\x00\r\n" * 1000
    assert server.command("GET", "k") == b"\x00\r\n" * 1000
    assert proxy.url == f"redis://127.0.0.1:{proxy.port}"
    assert sum(proxy.injected.values()) == 0


async def test_a_proxy_counts_commands_and_learns_a_connections_name(proxy: FaultProxy) -> None:
    async with connect(proxy.url) as redis, redis.connection() as connection:
        await connection.execute("CLIENT", "SETNAME", "reader-1")
        await connection.execute("PING")
        [seen] = proxy.connections
        assert seen.name == "reader-1"
        assert {"CLIENT", "PING"} <= seen.issued
        assert seen.commands >= 2
        assert named("reader-1")(seen) and issued("ping")(seen)
        assert not issued("XREADGROUP")(seen)


async def test_cut_closes_the_matching_connections_now(proxy: FaultProxy) -> None:
    async with connect(proxy.url) as redis:
        async with redis.connection() as first:
            await first.execute("CLIENT", "SETNAME", "doomed")
            async with redis.connection() as second:
                await second.execute("PING")
                assert proxy.cut(match=named("doomed")) == 1
                with trio.fail_after(STEP), pytest.raises(RedisConnectionError):
                    await first.execute("PING")
                assert await second.execute("PING") == b"PONG"
        with trio.fail_after(STEP):
            assert await redis.execute("PING") == b"PONG"  # a new connection is served
    assert proxy.injected["cut"] == 1


async def test_cut_after_commands_lets_the_nth_command_run_and_loses_its_reply(
    server: RedisServer, proxy: FaultProxy
) -> None:
    async with connect(proxy.url) as redis, redis.connection() as connection:
        await connection.execute("PING")
        proxy.cut_after(commands=2)
        await connection.execute("INCR", "n")  # the 1st command counted
        with trio.fail_after(STEP), pytest.raises(RedisConnectionError):
            await connection.execute("INCR", "n")  # the 2nd: it ran, its reply is lost
    assert server.command("GET", "n") == b"2"
    assert proxy.injected["cut_after_commands"] == 1


async def test_cut_after_bytes_cuts_at_that_byte_even_inside_a_reply(
    server: RedisServer, proxy: FaultProxy
) -> None:
    server.command("SET", "big", b"x" * 10_000)
    async with connect(proxy.url) as redis, redis.connection() as connection:
        await connection.execute("PING")
        [seen] = proxy.connections
        before = seen.bytes
        proxy.cut_after(bytes=100)
        with trio.fail_after(STEP), pytest.raises(RedisConnectionError):
            await connection.execute("GET", "big")
        assert seen.bytes - before == 100
    assert proxy.injected["cut_after_bytes"] == 1


async def test_cut_after_takes_exactly_one_positive_count(proxy: FaultProxy) -> None:
    with pytest.raises(ProxyError, match="exactly one"):
        proxy.cut_after()
    with pytest.raises(ProxyError, match="exactly one"):
        proxy.cut_after(bytes=1, commands=1)
    with pytest.raises(ProxyError, match=">= 1"):
        proxy.cut_after(commands=0)


async def test_a_blackhole_holds_open_connections_and_what_it_held_flows_once_healed(
    proxy: FaultProxy,
) -> None:
    async with await trio.open_tcp_stream(proxy.host, proxy.port) as raw:
        await raw.send_all(b"PING\r\n")
        assert await raw.receive_some() == b"+PONG\r\n"
        fault = proxy.blackhole()
        await raw.send_all(b"INCR n\r\n")
        with trio.move_on_after(0.3) as waited:
            await raw.receive_some()
        assert waited.cancelled_caught  # no answer while the hole holds
        assert proxy.injected["blackhole"] == 1
        fault.heal()
        with trio.fail_after(STEP):
            assert await raw.receive_some() == b":1\r\n"


async def test_a_blackhole_accepts_new_connections_and_never_answers(proxy: FaultProxy) -> None:
    proxy.blackhole()
    async with connect(f"{proxy.url}?connect_timeout=0.3") as redis:
        with trio.fail_after(STEP), pytest.raises(RedisError):
            await redis.execute("PING")  # the handshake times out
    assert proxy.injected["blackhole"] >= 1


async def test_a_command_timeout_fires_against_a_blackhole(proxy: FaultProxy) -> None:
    async with connect(f"{proxy.url}?command_timeout=0.3") as redis:
        await redis.execute("PING")
        proxy.blackhole()
        with trio.fail_after(STEP), pytest.raises(RedisTimeoutError):
            await redis.execute("PING")


async def test_refuse_new_resets_new_connections_and_spares_open_ones(proxy: FaultProxy) -> None:
    async with connect(proxy.url) as redis, redis.connection() as connection:
        await connection.execute("PING")
        fault = proxy.refuse_new()
        async with connect(proxy.url) as other:
            with trio.fail_after(STEP), pytest.raises(RedisError):
                await other.execute("PING")
        assert await connection.execute("PING") == b"PONG"
        fault.heal()
        async with connect(proxy.url) as other:
            assert await other.execute("PING") == b"PONG"
    assert proxy.injected["refuse_new"] == 1


async def test_delay_holds_each_chunk_in_the_direction_given(proxy: FaultProxy) -> None:
    async with connect(proxy.url) as redis, redis.connection() as connection:
        await connection.execute("PING")
        proxy.delay(to_client=0.2)
        started = trio.current_time()
        assert await connection.execute("PING") == b"PONG"
        assert trio.current_time() - started >= 0.2
        proxy.heal()
        proxy.delay(to_server=0.2)
        started = trio.current_time()
        assert await connection.execute("PING") == b"PONG"
        assert trio.current_time() - started >= 0.2
    assert proxy.injected["delay"] == 2


async def test_a_fault_with_a_predicate_spares_the_other_connections(proxy: FaultProxy) -> None:
    async with (
        connect(proxy.url) as redis,
        redis.connection() as reader,
        redis.connection() as writer,
    ):
        await reader.execute("XADD", "s", "*", "f", "v")
        await reader.execute("XGROUP", "CREATE", "s", "g", "0")
        await reader.execute("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">")
        await writer.execute("PING")
        proxy.blackhole(match=issued("XREADGROUP"))
        with trio.fail_after(STEP):
            assert await writer.execute("PING") == b"PONG"
        with trio.move_on_after(0.3) as waited:
            await reader.execute("PING")
        assert waited.cancelled_caught


async def test_closing_the_proxy_closes_every_connection(server: RedisServer) -> None:
    proxy = FaultProxy.in_front_of(server)
    async with proxy, connect(proxy.url) as redis, redis.connection() as connection:
        await connection.execute("PING")
        assert len(proxy.connections) == 1
        await proxy.aclose()
        assert proxy.connections == []
        with trio.fail_after(STEP), pytest.raises(RedisConnectionError):
            await connection.execute("PING")


async def test_the_port_is_known_only_while_serving(server: RedisServer) -> None:
    proxy = FaultProxy.in_front_of(server)
    with pytest.raises(ProxyError, match="not serving"):
        _ = proxy.url
    async with trio.open_nursery() as nursery:
        await nursery.start(proxy.serve)
        assert proxy.port > 0
        await proxy.aclose()


async def read_until_broken(raw: trio.SocketStream) -> tuple[bytes, trio.BrokenResourceError]:
    """What ``raw`` receives until it breaks (a reset); fails if it ends cleanly instead."""
    received = b""
    with trio.fail_after(STEP):
        while True:
            try:
                chunk = await raw.receive_some()
            except trio.BrokenResourceError as error:
                return received, error
            assert chunk, f"the connection ended cleanly after {received!r}, not with a reset"
            received += chunk


async def test_reset_mid_reply_sends_part_of_the_reply_then_an_rst(
    server: RedisServer, proxy: FaultProxy
) -> None:
    server.command("SET", "big", b"x" * 200)
    reply = b"$200\r\n" + b"x" * 200 + b"\r\n"
    async with await trio.open_tcp_stream(proxy.host, proxy.port) as raw:
        await raw.send_all(b"PING\r\n")
        assert await raw.receive_some() == b"+PONG\r\n"
        proxy.reset_mid_reply()
        await raw.send_all(b"GET big\r\n")
        received, error = await read_until_broken(raw)
        assert isinstance(error.__cause__, ConnectionResetError)
    assert 0 < len(received) < len(reply) and reply.startswith(received)
    assert proxy.injected["reset_mid_reply"] == 1


async def test_a_client_meets_a_reset_mid_reply_as_a_connection_error(proxy: FaultProxy) -> None:
    async with connect(proxy.url) as redis, redis.connection() as connection:
        await connection.execute("PING")
        proxy.reset_mid_reply()
        with trio.fail_after(STEP), pytest.raises(RedisConnectionError):
            await connection.execute("ECHO", "x" * 100)


async def received_before_reset(server: RedisServer, seed: int) -> list[int]:
    """How many bytes of each of 5 replies got through before the reset, under ``seed``."""
    server.command("SET", "big", b"x" * 200)
    lengths = []
    async with FaultProxy.in_front_of(server, seed=seed) as proxy:
        proxy.reset_mid_reply()
        for _ in range(5):
            async with await trio.open_tcp_stream(proxy.host, proxy.port) as raw:
                await raw.send_all(b"GET big\r\n")
                received, _ = await read_until_broken(raw)
                lengths.append(len(received))
    return lengths


async def test_the_same_seed_resets_replies_at_the_same_bytes(server: RedisServer) -> None:
    first = await received_before_reset(server, seed=11)
    assert await received_before_reset(server, seed=11) == first
    assert await received_before_reset(server, seed=12) != first


async def test_drip_delivers_replies_whole_a_few_bytes_at_a_time(
    server: RedisServer, proxy: FaultProxy
) -> None:
    server.command("SET", "k", b"v" * 50)
    async with await trio.open_tcp_stream(proxy.host, proxy.port) as raw:
        proxy.drip(chunk=7, every=0.001)
        await raw.send_all(b"GET k\r\n")
        chunks: list[bytes] = []
        with trio.fail_after(STEP):
            while sum(map(len, chunks)) < 57:
                chunks.append(bytes(await raw.receive_some()))
    assert b"".join(chunks) == b"$50\r\n" + b"v" * 50 + b"\r\n"
    assert max(map(len, chunks)) <= 7
    assert proxy.injected["drip"] == 1


async def test_a_client_reads_dripped_replies_as_if_nothing_happened(proxy: FaultProxy) -> None:
    proxy.drip(chunk=3, every=0)
    async with connect(proxy.url) as redis:
        with trio.fail_after(STEP):
            await redis.execute("SET", "k", "v" * 300)
            assert await redis.execute("GET", "k") == b"v" * 300


async def test_a_fault_matching_blmove_hits_only_the_connection_that_issued_it(
    proxy: FaultProxy,
) -> None:
    async with (
        connect(proxy.url) as redis,
        redis.connection() as mover,
        redis.connection() as other,
    ):
        await mover.execute("BLMOVE", "from", "to", "LEFT", "RIGHT", "0.01")
        await other.execute("PING")
        assert proxy.cut(match=issued("BLMOVE")) == 1
        with trio.fail_after(STEP), pytest.raises(RedisConnectionError):
            await mover.execute("PING")
        assert await other.execute("PING") == b"PONG"


async def test_a_connection_named_in_its_url_is_matched_by_name(proxy: FaultProxy) -> None:
    async with (
        connect(f"{proxy.url}?client_name=victim") as victim,
        connect(proxy.url) as bystander,
    ):
        await victim.execute("PING")
        await bystander.execute("PING")
        assert [c.name for c in proxy.connections] == ["victim", None]
        proxy.cut_after(commands=1, match=named("victim"))
        with trio.fail_after(STEP), pytest.raises(RedisConnectionError):
            await victim.execute("PING")
        assert await bystander.execute("PING") == b"PONG"


async def test_the_proxy_serves_once(proxy: FaultProxy) -> None:
    with pytest.raises(ProxyError, match="twice"):
        await proxy.serve()
