"""Sentinel: discover the primary by service name, verify its role, follow a failover."""

from __future__ import annotations

import pytest
import trio

from tests.redis_servers import RedisSentinelServers
from trio_streams.redis.client import (
    ConnectionOptions,
    Gap,
    Message,
    ReadOnlyError,
    Redis,
    RedisConnectionError,
    SentinelError,
    connect,
)
from trio_streams.redis.client.errors import Address
from trio_streams.redis.client.sentinel import SentinelLocator

from .redis_waits import eventually, read_until_message


async def test_primary_is_discovered_by_service_name(redis_sentinel: RedisSentinelServers) -> None:
    async with connect(redis_sentinel.url, client_name="via-sentinel") as client:
        assert isinstance(client, Redis)
        assert await client.execute("SET", "k", "v") == b"OK"
        assert client.address == redis_sentinel.primary().address
        role = await client.execute("ROLE")
        assert role[0] == b"master"


async def test_unknown_service_is_a_sentinel_error(redis_sentinel: RedisSentinelServers) -> None:
    url = redis_sentinel.url.replace(redis_sentinel.service, "no-such-service")
    async with connect(url) as client:
        with pytest.raises(SentinelError, match="no sentinel named a primary for service"):
            await client.execute("PING")


async def test_a_node_that_is_not_primary_is_refused(redis_sentinel: RedisSentinelServers) -> None:
    sentinels = tuple(s.address for s in redis_sentinel.sentinels)
    locator = SentinelLocator(
        sentinels,
        redis_sentinel.service,
        node_options=ConnectionOptions(),
        sentinel_options=ConnectionOptions(),
    )
    primary = redis_sentinel.primary()
    replica = next(s for s in redis_sentinel.data_nodes if s is not primary)
    locator._primary = replica.address  # as if the sentinels had named a stale node
    with pytest.raises(SentinelError, match="reports role 'slave'"):
        await locator.open_primary()
    assert locator.known_primary is None  # forgotten: the next attempt asks again
    connection = await locator.open_primary()
    assert connection.address == primary.address
    connection.close()


async def test_failover_is_followed_without_resending(
    redis_sentinel: RedisSentinelServers,
) -> None:
    async with connect(redis_sentinel.url, backoff_initial=0.01, backoff_cap=0.2) as client:
        assert isinstance(client, Redis)
        await client.execute("SET", "before", 1)
        assert await client.execute("WAIT", 1, 5000) == 1  # replicated before the crash
        old = redis_sentinel.primary()
        async with client.subscribe(["events"]) as subscription:
            # The primary crashes; the sentinels are told to fail over to the replica.
            await trio.to_thread.run_sync(old.kill)
            new = await trio.to_thread.run_sync(redis_sentinel.failover)
            assert new is not old

            # The first command may meet the dead primary: it fails, typed, and is not
            # re-sent. The caller decides to retry; the client then finds the new primary.
            async def written() -> bool:
                try:
                    await client.execute("INCR", "after")
                except RedisConnectionError:
                    return False
                return True

            await eventually(written, within=10, what="the client to reach the new primary")
            assert client.address == new.address
            assert await client.execute("GET", "after") == b"1"  # exactly one INCR landed
            assert await client.execute("GET", "before") == b"1"

            # The subscription follows too (while iterated), and says it was deaf for a while.
            items: list[Message | Gap] = []
            got_message = trio.Event()

            async def heard() -> bool:
                return bool(await client.execute("PUBLISH", "events", "on-new-primary"))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_until_message, subscription, items, got_message)
                await eventually(heard, within=10, what="the subscription to resubscribe")
                with trio.fail_after(5):
                    await got_message.wait()
        gap, message = items
        assert isinstance(gap, Gap)
        assert message == Message("message", b"events", b"on-new-primary")
    # Bring the old primary back: the sentinels turn it into a replica of the new one.
    await trio.to_thread.run_sync(old.start)


@pytest.mark.slow
async def test_after_a_manual_failover_writes_reach_the_new_primary_once_it_is_announced(
    redis_sentinel: RedisSentinelServers,
) -> None:
    async with connect(redis_sentinel.url, backoff_initial=0.01, backoff_cap=0.1) as client:
        assert isinstance(client, Redis)
        old = redis_sentinel.primary()
        await client.execute("DEL", "log")
        assert client.address == old.address
        # (node that acknowledged, primary the client knew when the write started)
        acks: list[tuple[Address, Address | None]] = []
        new_address: Address | None = None
        reached_new = trio.Event()
        stop = trio.Event()

        async def writer() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                known = client.address
                try:
                    async with client.connection() as connection:
                        await connection.execute("RPUSH", "log", n)
                        node = connection.address
                except (ReadOnlyError, RedisConnectionError):
                    await trio.lowlevel.checkpoint()
                    continue
                acks.append((node, known))
                if node == new_address:
                    reached_new.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer)
            # A manual failover: the old primary stays up and accepts writes until the
            # sentinels reconfigure it, seconds later. Returns once they announced it.
            new = await trio.to_thread.run_sync(redis_sentinel.failover)
            new_address = new.address
            with trio.fail_after(10):
                await reached_new.wait()
            # The client moved on the announcement, not because the old primary refused:
            # that one still takes writes.
            assert old.command("ROLE")[0] == b"master"
            stop.set()
        assert client.address == new.address
        # From the first write the client started knowing the new primary, every write was
        # acknowledged by it: none went to the demoted primary (a write already in flight
        # when the announcement came, at most one here, may still be acknowledged there).
        first = next(i for i, (_, known) in enumerate(acks) if known == new.address)
        assert {node for node, _ in acks[first:]} == {new.address}
