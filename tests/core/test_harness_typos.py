"""Under ``app.test()``, a name the app does not know is refused, not silently accepted."""

from __future__ import annotations

import pytest

from trio_streams import (
    App,
    ConfigurationError,
    Destination,
    MemoryBroker,
    MemoryStream,
)
from trio_streams.redis import RedisBroker, RedisChannel, RedisList

URL = "redis://127.0.0.1:1"  # never connected: app.test() runs it in-process


def shop() -> tuple[App, MemoryBroker]:
    app = App("shop")
    broker = app.broker(MemoryBroker())
    receipts = broker.publisher("receipts")

    @receipts
    @broker.subscriber(MemoryStream("orders"), dead_letter="orders.dead", name="handle")
    async def handle(n: int) -> int:
        if n < 0:
            raise ValueError("negative")
        return n

    @broker.subscriber(MemoryStream("payments"))
    async def pay(n: int) -> None: ...

    return app, broker


async def test_publish_to_a_destination_no_subscription_reads_is_refused_listing_the_names() -> (
    None
):
    app, _ = shop()
    async with app.test() as t:
        with pytest.raises(ConfigurationError) as caught:
            await t.publish("ordres", 1)
        assert t.handler("handle").records == []
    message = str(caught.value)
    assert "no subscription of app 'shop' reads stream 'ordres'" in message, message
    assert "it reads 'orders', 'payments'" in message, message  # the closest first
    assert "unread_ok=True" in message and "\n" not in message, message


async def test_the_closest_name_comes_first() -> None:
    app, _ = shop()
    async with app.test() as t:
        with pytest.raises(ConfigurationError, match="it reads 'payments', 'orders'"):
            await t.publish("paymnets", 1)


async def test_published_of_a_destination_nothing_writes_to_is_refused_listing_the_names() -> None:
    app, _ = shop()
    async with app.test() as t:
        await t.publish("orders", 2)
        with pytest.raises(ConfigurationError) as caught:
            t.published("reciepts")
    message = str(caught.value)
    assert "nothing of app 'shop' writes to stream 'reciepts'" in message, message
    assert "it knows 'receipts', " in message, message  # the closest first
    assert "'orders.dead'" in message and "'payments'" in message, message
    assert "unwritten_ok=True" in message and "\n" not in message, message


async def test_what_the_app_writes_reads_and_dead_letters_to_can_be_looked_at_empty() -> None:
    app, _ = shop()
    async with app.test() as t:
        assert t.published("receipts") == []  # a publisher's destination
        assert t.published("orders.dead") == []  # a dead letter
        assert t.published("payments") == []  # read, so retry copies may come back to it
        await t.publish("orders", -1)
        assert [m.json() for m in t.published("orders.dead")] == [-1]


async def test_a_name_something_was_published_to_during_the_test_can_be_looked_at() -> None:
    app, broker = shop()
    async with app.test() as t:
        await broker.publish("audit", "by hand")  # as a handler's ctx.publish would
        assert [m.decode(str) for m in t.published("audit")] == ["by hand"]


async def test_unread_ok_and_unwritten_ok_say_it_is_meant() -> None:
    app, _ = shop()
    async with app.test() as t:
        await t.publish("nobody.reads", 1, unread_ok=True)
        assert [m.json() for m in t.published("nobody.reads")] == [1]
        assert t.published("nothing.here", unwritten_ok=True) == []
        assert t.handler("handle").records == []


async def test_a_publish_of_the_wrong_kind_is_refused_as_unread() -> None:
    app = App("jobs")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisList("jobs"))
    async def work(n: int) -> None: ...

    async with app.test() as t:
        await t.publish(Destination.list("jobs"), 1)
        assert t.handler(work).call_count == 1
        with pytest.raises(ConfigurationError, match="reads stream 'jobs'"):
            await t.publish("jobs", 2)  # a stream named like the list: nothing reads it


async def test_a_pattern_subscription_reads_the_channels_it_matches() -> None:
    app = App("news")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisChannel("news.*", pattern=True))
    async def read(n: int) -> None: ...

    async with app.test() as t:
        await t.publish(Destination.channel("news.eu"), 1)
        assert t.handler(read).call_count == 1
        with pytest.raises(ConfigurationError, match=r"reads channel 'sport\.eu'"):
            await t.publish(Destination.channel("sport.eu"), 2)
        with pytest.raises(ConfigurationError, match=r"reads shard channel 'news\.eu'"):
            await t.publish(Destination.channel("news.eu", sharded=True), 3)


async def test_with_several_brokers_the_refusal_names_the_broker_published_on() -> None:
    app = App("svc")
    first = app.broker(MemoryBroker(name="first"))
    second = app.broker(MemoryBroker(name="second"))

    @first.subscriber(MemoryStream("a"))
    async def on_a(n: int) -> None: ...

    async with app.test() as t:
        with pytest.raises(ConfigurationError, match="app 'svc' on broker 'second' reads stream"):
            await t.publish("a", 1, broker=second)
        await t.publish("a", 1, broker=first)
        assert t.handler(on_a).call_count == 1
