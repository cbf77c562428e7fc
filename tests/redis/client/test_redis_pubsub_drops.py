"""Pub/Sub: a subscriber that falls behind is dropped by the server (its output-buffer limit);
``Subscription.watch`` finds the drop while the caller reads nothing, from before it happened,
subscribes again at once, and the iteration still yields what was received before the drop."""

from __future__ import annotations

import pytest
import trio

from tests.redis_servers import RedisServer
from trio_streams.redis.client import Gap, Message, RedisClient, RedisError, connect

from .redis_waits import eventually

_PAD = b"x" * 4000


async def _publish_until_dropped(client: RedisClient, first: int) -> tuple[int, float]:
    """Publish numbered messages from ``first`` until nobody receives them; the next number,
    and when the drop was seen (it happened before)."""
    n = first
    while await client.execute("PUBLISH", "news", b"%08d" % n + _PAD) == 1:
        n += 1
        assert n - first < 100_000, "the server never dropped the subscriber"
    return n + 1, trio.current_time()


async def _subscribed(client: RedisClient) -> None:
    async def one() -> bool:
        reply = await client.execute("PUBSUB", "NUMSUB", "news")
        return int(reply[1]) == 1

    await eventually(one, within=10, what="the subscriber back")


@pytest.mark.parametrize("protocol", [3, 2])
async def test_two_drops_while_the_caller_reads_nothing_are_found_at_once_and_delivered_in_order(
    redis_server: RedisServer, protocol: int
) -> None:
    lost: list[RedisError] = []
    resumed: list[Gap] = []
    async with connect(
        redis_server.url,
        protocol=protocol,
        health_check_interval=0.05,
        backoff_initial=0.01,
        backoff_cap=0.05,
    ) as client:
        await client.execute("CONFIG", "SET", "client-output-buffer-limit", "pubsub 64kb 32kb 60")
        # A loss is dated from when the connection was last known alive, which may be the
        # subscription's own confirmation: the bound is taken before subscribing.
        subscribed_at = trio.current_time()
        async with (
            client.subscribe(["news"], on_lost=lost.append, on_resumed=resumed.append) as sub,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(sub.watch)
            after_first, first_seen = await _publish_until_dropped(client, 0)

            async def resumed_once() -> bool:
                await trio.lowlevel.checkpoint()
                return len(resumed) == 1

            await eventually(resumed_once, within=10, what="subscribed again")
            await _subscribed(client)
            second_from = after_first + 1
            _, second_seen = await _publish_until_dropped(client, second_from)

            async def lost_twice() -> bool:
                await trio.lowlevel.checkpoint()
                return len(lost) == 2

            # Found while the first dropped connection still waits to be read.
            await eventually(lost_twice, within=10, what="the second drop found")
            assert len(resumed) == 1  # one drains at a time: the second waits for the first

            items: list[Message | Gap] = []
            with trio.fail_after(30):
                async for item in sub:
                    items.append(item)
                    if sum(type(i) is Gap for i in items) == 2:
                        break
            nursery.cancel_scope.cancel()
    gaps = [i for i in items if type(i) is Gap]
    assert gaps[0] is resumed[0] and gaps[1] is resumed[1]
    assert subscribed_at <= gaps[0].lost_at <= first_seen < gaps[0].resumed_at
    assert gaps[0].resumed_at <= gaps[1].lost_at <= second_seen < gaps[1].resumed_at
    assert "dropped the connection" in str(lost[0]) and "dropped" in str(lost[1])
    # What each connection received comes in order, its gap after it.
    split = items.index(gaps[0])
    before = [int(i.data[:8]) for i in items[:split] if isinstance(i, Message)]
    between = [int(i.data[:8]) for i in items[split + 1 : -1] if isinstance(i, Message)]
    assert before == list(range(len(before))) and len(before) > 1
    assert between == list(range(second_from, second_from + len(between)))
    assert len(between) > 1 and items[-1] is gaps[1]


@pytest.mark.parametrize("protocol", [3, 2])
async def test_the_probe_leaves_a_subscription_that_keeps_up_undisturbed(
    redis_server: RedisServer, protocol: int
) -> None:
    lost: list[RedisError] = []
    async with (
        connect(redis_server.url, protocol=protocol) as client,
        client.subscribe(["news"], on_lost=lost.append) as sub,
    ):
        for n in range(20):
            assert sub.connection is not None and sub.connection.probe()
            assert sub.connection.probe()  # two in a row: ignored, no reply to wait for
            assert await client.execute("PUBLISH", "news", str(n)) == 1
            item = await anext(sub)
            assert isinstance(item, Message) and item.data == str(n).encode()
        await sub.subscribe("other")  # answered in order: nothing answered the probes
        assert await client.execute("PUBLISH", "other", "o") == 1
        item = await anext(sub)
        assert isinstance(item, Message) and item.channel == b"other"
    assert lost == []


async def test_what_the_new_connection_brings_while_the_dropped_one_drains_comes_after_it(
    redis_server: RedisServer,
) -> None:
    resumed: list[Gap] = []
    async with connect(
        redis_server.url, health_check_interval=0.05, backoff_initial=0.01, backoff_cap=0.05
    ) as client:
        await client.execute("CONFIG", "SET", "client-output-buffer-limit", "pubsub 64kb 32kb 60")
        async with (
            client.subscribe(["news"], on_resumed=resumed.append) as sub,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(sub.watch)
            await _publish_until_dropped(client, 0)

            async def resumed_once() -> bool:
                await trio.lowlevel.checkpoint()
                return len(resumed) == 1

            await eventually(resumed_once, within=10, what="subscribed again")
            assert await client.execute("PUBLISH", "news", b"new") == 1
            await sub.subscribe("other")  # reads the new connection: "new" waits behind the old
            assert sub.channels == {b"news", b"other"}
            assert await client.execute("PUBLISH", "other", b"other") == 1
            items: list[Message | Gap] = []
            with trio.fail_after(30):
                async for item in sub:
                    items.append(item)
                    if isinstance(item, Message) and item.channel == b"other":
                        break
            nursery.cancel_scope.cancel()
    at = items.index(resumed[0])
    old = [int(i.data[:8]) for i in items[:at] if isinstance(i, Message)]
    assert len(old) == at > 1 and old == list(range(at))
    assert [(i.channel, i.data) for i in items[at + 1 :] if isinstance(i, Message)] == [
        (b"news", b"new"),
        (b"other", b"other"),
    ]
