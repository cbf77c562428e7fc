"""Pub/Sub: channels, patterns and shard channels as an async iterator; resubscribe with the
gap reported after the server comes back."""

from __future__ import annotations

from contextlib import AbstractContextManager

import pytest
import trio

from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis.client import (
    Gap,
    Message,
    NoPermissionError,
    RedisConnectionError,
    RedisTimeoutError,
    connect,
    parse_url,
)

from .redis_waits import eventually, read_until_message


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


async def test_a_hung_server_becomes_a_gap_and_delivery_resumes_after_the_reconnect(
    redis_server: RedisServer,
) -> None:
    async with connect(
        redis_server.url,
        health_check_interval=0.2,
        health_check_timeout=0.5,
        connect_timeout=1,
        backoff_initial=0.01,
        backoff_cap=0.1,
    ) as client:
        async with client.subscribe(["news"]) as subscription:
            await client.execute("PUBLISH", "news", "before")
            with trio.fail_after(5):
                assert await anext(subscription) == Message("message", b"news", b"before")
            first = subscription.connection
            assert first is not None
            items: list[Message | Gap] = []
            got_message = trio.Event()
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_until_message, subscription, items, got_message)
                    redis_server.pause()  # SIGSTOP: sockets stay open, nothing answers
                    try:

                        async def given_up() -> bool:
                            await trio.lowlevel.checkpoint()
                            return first.broken

                        await eventually(given_up, within=10, what="the health check to fail")
                    finally:
                        redis_server.resume()

                    async def heard() -> bool:
                        return bool(await client.execute("PUBLISH", "news", "after"))

                    await eventually(heard, within=15, what="the subscription to come back")
                    await got_message.wait()
        gap, message = items
        assert isinstance(gap, Gap)
        assert isinstance(gap.error, RedisTimeoutError)
        assert "health-check PING" in str(gap.error)
        assert message == Message("message", b"news", b"after")
        assert subscription.connection is not first


async def test_a_quiet_healthy_subscription_is_pinged_and_kept(redis_server: RedisServer) -> None:
    async with (
        connect(redis_server.url, health_check_interval=0.05, health_check_timeout=5) as client,
        client.subscribe(["quiet"]) as subscription,
    ):
        connection = subscription.connection
        with trio.move_on_after(0.5):  # ten intervals of silence: PINGs, all answered
            await anext(subscription)
        assert subscription.connection is connection
        stats = (await client.execute("INFO", "commandstats")).decode()
        assert "cmdstat_ping:calls=" in stats
        await client.execute("PUBLISH", "quiet", "still here")
        with trio.fail_after(5):
            assert await anext(subscription) == Message("message", b"quiet", b"still here")


def channel_limited_server() -> AbstractContextManager[RedisServer]:
    """A server with an ACL user that may use channels ``ok*`` only."""
    return start_redis_server(
        "--user", "app", "on", ">app-secret", "~*", "resetchannels", "&ok*", "+@all"
    )


@pytest.mark.parametrize("protocol", [3, 2])
async def test_a_refused_subscribe_raises_at_the_call_and_the_subscription_lives_on(
    protocol: int,
) -> None:
    with channel_limited_server() as server:
        admin = connect(server.url)
        url = server.url.replace("redis://", "redis://app:app-secret@")
        async with (
            admin,
            connect(url, protocol=protocol) as client,
            client.subscribe(["ok1"]) as subscription,
        ):
            with pytest.raises(NoPermissionError, match="SUBSCRIBE bad, ok2") as caught:
                await subscription.subscribe("bad", "ok2")
            assert caught.value.address == server.address
            with pytest.raises(NoPermissionError, match="PSUBSCRIBE bad"):
                await subscription.psubscribe("bad*")
            assert subscription.channels == {b"ok1"}
            assert subscription.patterns == frozenset()

            # A subscribe from another task while one iterates: the iterating task reads
            # the answer, the caller gets it.
            items: list[Message | Gap] = []
            got_message = trio.Event()
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_until_message, subscription, items, got_message)
                    with pytest.raises(NoPermissionError, match="SUBSCRIBE bad2"):
                        await subscription.subscribe("bad2")
                    await subscription.subscribe("ok2")
                    assert subscription.channels == {b"ok1", b"ok2"}
                    await client.execute("PUBLISH", "ok2", "hello")
                    await got_message.wait()
            assert items == [Message("message", b"ok2", b"hello")]

            # A reconnect subscribes to what the server confirmed: no refusal kills it.
            await admin.execute("CLIENT", "KILL", "TYPE", "pubsub")
            items.clear()
            got_message = trio.Event()
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(read_until_message, subscription, items, got_message)

                    async def heard() -> bool:
                        return bool(await client.execute("PUBLISH", "ok1", "again"))

                    await eventually(heard, what="the subscription to come back")
                    await got_message.wait()
            gap, message = items
            assert isinstance(gap, Gap)
            assert message == Message("message", b"ok1", b"again")
            assert subscription.channels == {b"ok1", b"ok2"}


async def test_a_refused_initial_subscription_raises_from_async_with() -> None:
    with channel_limited_server() as server:
        url = server.url.replace("redis://", "redis://app:app-secret@")
        async with connect(url) as client:
            with pytest.raises(NoPermissionError, match="SUBSCRIBE bad"):
                async with client.subscribe(["bad"]):
                    pass


def test_health_check_options_come_from_the_url_and_are_checked() -> None:
    config = parse_url("redis://h/0?health_check_interval=0.5&health_check_timeout=2")
    assert (config.health_check_interval, config.health_check_timeout) == (0.5, 2.0)
    assert parse_url("redis://h", health_check_interval=0).health_check_interval == 0
    with pytest.raises(ConfigurationError, match="health_check_interval must be"):
        parse_url("redis://h", health_check_interval=-1)
    with pytest.raises(ConfigurationError, match="health_check_timeout must be"):
        parse_url("redis://h?health_check_timeout=inf")
    with pytest.raises(ConfigurationError, match="health_check_timeout must be"):
        parse_url("redis://h", health_check_timeout=0)
    with pytest.raises(ConfigurationError, match="health_check_interval must be"):
        parse_url("redis://h", health_check_interval=True)


@pytest.mark.parametrize("protocol", [3, 2])
async def test_take_buffered_hands_out_what_already_arrived_in_order_without_waiting(
    redis_server: RedisServer, protocol: int
) -> None:
    async with connect(redis_server.url, protocol=protocol) as client:
        async with client.subscribe(["news"]) as subscription:
            assert subscription.take_buffered(10) == []  # nothing yet: returns, never waits
            pipeline = client.pipeline()
            for n in range(50):
                pipeline.add("PUBLISH", "news", str(n))
            await pipeline.execute()
            received: list[Message | Gap] = []
            with trio.fail_after(5):
                while len(received) < 50:
                    received.append(await anext(subscription))
                    burst = subscription.take_buffered(50 - len(received))
                    assert len(burst) <= 50 - len(received)  # never more than asked
                    received += burst
        assert received == [Message("message", b"news", str(n).encode()) for n in range(50)]


async def test_on_lost_is_told_once_per_loss_with_its_cause(redis_server: RedisServer) -> None:
    lost: list[Exception] = []
    async with (
        connect(redis_server.url, backoff_initial=0.01, backoff_cap=0.05) as client,
        client.subscribe(["news"], on_lost=lost.append) as subscription,
    ):
        await trio.to_thread.run_sync(redis_server.kill)
        async with trio.open_nursery() as nursery:
            got: list[Message | Gap] = []

            async def read() -> None:
                got.append(await anext(subscription))

            nursery.start_soon(read)

            async def retried_twice() -> bool:  # no event announces a failed attempt
                await trio.lowlevel.checkpoint()
                return subscription._backoff.failures >= 2

            await eventually(retried_twice, within=10, what="two failed reconnects")
            await trio.to_thread.run_sync(redis_server.start)
        [gap] = got
    assert isinstance(gap, Gap) and gap.attempts > 1
    assert len(lost) == 1 and isinstance(lost[0], RedisConnectionError)
