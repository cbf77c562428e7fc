"""``app.test()`` with several brokers: which broker a destination given to ``t.publish`` or
``t.published`` is on, without ``broker=`` wherever only one broker can mean it."""

from pathlib import Path

import pytest

from trio_streams import (
    App,
    ConfigurationError,
    Destination,
    MemoryBroker,
    MemoryStream,
    Router,
)
from trio_streams.file import FileBroker, FileStream
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream

#: Never connected: under app.test() every broker runs in-process.
UNUSED_URL = "redis://127.0.0.1:1"


def shop(tmp_path: Path) -> tuple[App, FileBroker, RedisBroker]:
    """A file broker whose handler dead-letters and publishes, and a Redis broker."""
    app = App("shop")
    log = app.broker(FileBroker(tmp_path / "shop.ss"))
    redis = app.broker(RedisBroker(UNUSED_URL))

    @log.subscriber(FileStream("orders"), max_attempts=1, dead_letter="orders.dead")
    @redis.publisher("receipts")
    async def charge(n: int) -> str:
        if n < 0:
            raise ValueError(f"cannot charge {n}")
        return f"receipt {n}"

    @redis.subscriber(RedisStream("payments", group="billing"))
    async def pay(n: int) -> None: ...

    return app, log, redis


async def test_the_dead_letter_of_a_handler_is_found_on_its_subscriptions_broker(
    tmp_path: Path,
) -> None:
    app, log, _ = shop(tmp_path)
    async with app.test() as t:
        await t.publish("orders", -1)
        dead = t.published("orders.dead")
        assert [m.json() for m in dead] == [-1]
        assert dead == t.published("orders.dead", broker=log)


async def test_a_publishers_destination_is_found_on_its_broker(tmp_path: Path) -> None:
    app, _, redis = shop(tmp_path)
    async with app.test() as t:
        await t.publish("orders", 2)
        assert [m.decode(str) for m in t.published("receipts")] == ["receipt 2"]
        assert t.published("receipts") == t.published("receipts", broker=redis)


async def test_publish_finds_a_publishers_or_dead_letters_destination_too(tmp_path: Path) -> None:
    app, log, redis = shop(tmp_path)
    async with app.test() as t:
        # Nothing reads either: the test is of where they go.
        await t.publish("receipts", "by hand", unread_ok=True)
        await t.publish("orders.dead", 7, unread_ok=True)
        assert [m.decode(str) for m in t.published("receipts", broker=redis)] == ["by hand"]
        assert [m.json() for m in t.published("orders.dead", broker=log)] == [7]


async def test_a_name_used_on_two_brokers_is_ambiguous_and_the_error_names_both(
    tmp_path: Path,
) -> None:
    app, log, redis = shop(tmp_path)

    @redis.subscriber(RedisStream("orders", group="audit"))
    async def audit(n: int) -> None: ...

    async with app.test() as t:
        with pytest.raises(ConfigurationError) as looking:
            t.published("orders")
        with pytest.raises(ConfigurationError) as publishing:
            await t.publish("orders", 1)
    for caught in (looking, publishing):
        message = str(caught.value)
        assert "\n" not in message and len(message) < 160, message
        assert f"{log.name!r}" in message and f"{redis.name!r}" in message, message
        assert "broker=" in message, message
    assert "<" not in str(looking.value), "names the brokers, not their reprs"


async def test_a_list_is_found_on_the_only_broker_that_has_lists(tmp_path: Path) -> None:
    app = App("jobs")
    log = app.broker(FileBroker(tmp_path / "jobs.ss"))
    redis = app.broker(RedisBroker(UNUSED_URL))
    taken: list[int] = []

    @log.subscriber(FileStream("jobs"))
    async def mirror(n: int) -> None: ...

    @redis.subscriber(RedisList("jobs"))
    async def work(n: int) -> None:
        taken.append(n)

    async with app.test() as t:
        await t.publish(Destination.list("jobs"), 1)  # a stream file has no lists
        assert [m.json() for m in t.published(Destination.list("jobs"))] == [1]
    assert taken == [1]


async def test_a_prefixed_routers_publisher_is_found_by_its_full_name() -> None:
    app = App("svc")
    first = app.broker(MemoryBroker(name="first"))
    second = app.broker(MemoryBroker(name="second"))
    router = Router(prefix="shop.")

    @router.subscriber(MemoryStream("orders"))
    @router.publisher("receipts")
    async def charge(n: int) -> int:
        return n

    second.include_router(router)

    @first.subscriber(MemoryStream("other"))
    async def other(n: int) -> None: ...

    async with app.test() as t:
        await t.publish("shop.orders", 3)
        assert [m.json() for m in t.published("shop.receipts")] == [3]


async def test_a_name_no_broker_uses_is_refused_naming_the_brokers_and_broker_equals() -> None:
    app = App("svc")
    first = app.broker(MemoryBroker(name="first"))
    second = app.broker(MemoryBroker(name="second"))

    @first.subscriber(MemoryStream("a"))
    async def on_a(n: int) -> None: ...

    @second.subscriber(MemoryStream("b"))
    async def on_b(n: int) -> None: ...

    async with app.test() as t:
        with pytest.raises(ConfigurationError) as caught:
            t.published("nowhere")
        await t.publish("nowhere", 1, broker=second, unread_ok=True)
        assert [m.json() for m in t.published("nowhere", broker=second)] == [1]
    message = str(caught.value)
    assert "'nowhere'" in message and "'first'" in message and "'second'" in message, message
    assert "broker=" in message and "\n" not in message, message


async def test_brokers_of_the_same_name_are_told_apart_in_the_error() -> None:
    app = App("svc")
    first = app.broker(MemoryBroker())
    second = app.broker(MemoryBroker())
    for broker in (first, second):

        @broker.subscriber(MemoryStream("orders"))
        async def handle(n: int) -> None: ...

    async with app.test() as t:
        with pytest.raises(ConfigurationError) as caught:
            await t.publish("orders", 1)
        await t.publish("orders", 1, broker=second)
        assert t.published("orders", broker=first) == []
    message = str(caught.value)
    assert message.count("'memory'") == 2 and "1st" in message and "2nd" in message, message


async def test_a_broker_that_is_not_the_apps_is_refused_by_name() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"))
    async def handle(n: int) -> None: ...

    stranger = MemoryBroker(name="stranger")
    async with app.test() as t:
        with pytest.raises(ConfigurationError, match="broker 'stranger' is not a broker of app"):
            t.published("orders", broker=stranger)


async def test_a_channel_a_pattern_subscription_matches_is_found_on_its_broker() -> None:
    app = App("news")
    wires = app.broker(RedisBroker(UNUSED_URL, name="wires"))
    orders = app.broker(RedisBroker(UNUSED_URL, name="orders"))
    heard: list[str] = []

    @wires.subscriber(RedisChannel("news.*", pattern=True))
    async def ticker(title: str) -> None:
        heard.append(title)

    @orders.subscriber(RedisStream("orders", group="billing"))
    async def bill(n: int) -> None: ...

    async with app.test() as t:
        await t.publish(Destination.channel("news.eu"), "rates held")
        assert [m.decode(str) for m in t.published(Destination.channel("news.eu"))] == [
            "rates held"
        ]
        with pytest.raises(ConfigurationError, match="named by none"):
            t.published(Destination.channel("sport.eu"))
    assert heard == ["rates held"]
