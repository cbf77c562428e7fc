"""Pub/Sub: channels, patterns and shard channels as an async iterator; resubscribe with the
gap reported after the server comes back."""

from __future__ import annotations

import pytest
import trio

from tests.redis_servers import RedisServer
from trio_streams.redis.client import Gap, Message, RedisConnectionError, connect

from .redis_waits import eventually


@pytest.mark.parametrize("protocol", [3, 2])
async def test_channels_patterns_and_shard_channels(
    redis_server: RedisServer, protocol: int
) -> None:
    async with connect(redis_server.url, protocol=protocol) as client:
        async with client.subscribe(
            ["news"], patterns=["orders.*"], shard_channels=["{shard}.events"]
        ) as subscription:
            assert subscription.connection is not None
            assert subscription.connection.protocol == protocol
            # Subscriptions are confirmed when `async with` returns: nothing is missed.
            assert await client.execute("PUBLISH", "news", "n1") == 1
            assert await client.execute("PUBLISH", "orders.eu", "o1") == 1
            assert await client.execute("SPUBLISH", "{shard}.events", "s1") == 1
            with trio.fail_after(5):
                received = [await anext(subscription) for _ in range(3)]
        assert received == [
            Message("message", b"news", b"n1"),
            Message("pmessage", b"orders.eu", b"o1", pattern=b"orders.*"),
            Message("smessage", b"{shard}.events", b"s1"),
        ]


async def test_subscribe_and_unsubscribe_while_iterating(redis_server: RedisServer) -> None:
    async with connect(redis_server.url) as client, client.subscribe(["a"]) as subscription:
        await subscription.subscribe("b")
        await subscription.unsubscribe("a")
        await subscription.psubscribe("p.*")
        assert subscription.channels == {b"b"}
        assert subscription.patterns == {b"p.*"}
        # Commands on one connection run in order: once PUBLISH to b is delivered, the
        # subscription changes sent before it are in effect.
        async with trio.open_nursery() as nursery:
            got: list[Message | Gap] = []

            async def read_two() -> None:
                async for item in subscription:
                    got.append(item)
                    if len(got) == 2:
                        return

            nursery.start_soon(read_two)

            async def changes_applied() -> bool:
                numsub = await client.execute("PUBSUB", "NUMSUB", "a", "b")
                numpat = await client.execute("PUBSUB", "NUMPAT")
                return bool(numsub == [b"a", 0, b"b", 1] and numpat == 1)

            await eventually(changes_applied, what="the subscription changes to apply")
            assert await client.execute("PUBLISH", "a", "dropped") == 0
            await client.execute("PUBLISH", "b", "kept")
            await client.execute("PUBLISH", "p.x", "matched")
        assert got == [
            Message("message", b"b", b"kept"),
            Message("pmessage", b"p.x", b"matched", pattern=b"p.*"),
        ]


async def test_resubscribes_after_restart_and_reports_the_gap(redis_server: RedisServer) -> None:
    async with connect(redis_server.url, backoff_initial=0.01, backoff_cap=0.1) as client:
        async with client.subscribe(["news"], patterns=["p.*"]) as subscription:
            await client.execute("PUBLISH", "news", "before")
            with trio.fail_after(5):
                assert await anext(subscription) == Message("message", b"news", b"before")
            await trio.to_thread.run_sync(redis_server.kill)
            async with trio.open_nursery() as nursery:
                items: list[Message | Gap] = []
                done = trio.Event()

                async def read() -> None:
                    async for item in subscription:
                        items.append(item)
                        if isinstance(item, Message):
                            done.set()
                            return

                nursery.start_soon(read)
                await trio.to_thread.run_sync(redis_server.start)

                async def heard() -> bool:  # PUBLISH counts the receivers
                    return bool(await client.execute("PUBLISH", "news", "after"))

                await eventually(heard, within=10, what="the subscription to come back")
                with trio.fail_after(5):
                    await done.wait()
        gap, message = items
        assert isinstance(gap, Gap)
        assert isinstance(gap.error, RedisConnectionError)
        assert gap.resumed_at >= gap.lost_at
        assert gap.attempts >= 1
        assert message == Message("message", b"news", b"after")
        assert subscription.patterns == {b"p.*"}  # resubscribed to everything


async def test_closed_subscription_ends_iteration(redis_server: RedisServer) -> None:
    async with connect(redis_server.url) as client:
        subscription = client.subscribe(["x"])
        async with subscription:
            pass
        assert [item async for item in subscription] == []


async def test_cancelled_wait_for_a_message_keeps_the_subscription(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url) as client, client.subscribe(["quiet"]) as subscription:
        connection = subscription.connection
        with trio.move_on_after(0.05) as waited:
            await anext(subscription)
        assert waited.cancelled_caught
        assert subscription.connection is connection  # no reconnect, so no gap
        assert connection is not None
        assert not connection.broken
        await client.execute("PUBLISH", "quiet", "still here")
        with trio.fail_after(5):
            assert await anext(subscription) == Message("message", b"quiet", b"still here")
