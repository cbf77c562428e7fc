"""``@redis_broker.subscriber("orders")`` against a real server: a consumer group member of the
stream, the group the broker's ``group=`` or else named after the app that runs it
(``<app>/<subscription>``)."""

from __future__ import annotations

from typing import Any

import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient
from trio_streams.redis.wire import text


class Seen:
    """What a handler saw, and a wait for the n-th message."""

    def __init__(self, total: Seen | None = None) -> None:
        self.numbers: list[int] = []
        self._changed = trio.Event()
        #: Also told of each message (what several handlers saw together).
        self._total = total

    def saw(self, n: int) -> None:
        self.numbers.append(n)
        self._changed.set()
        self._changed = trio.Event()
        if self._total is not None:
            self._total.saw(n)

    async def handle(self, n: int) -> None:
        self.saw(n)

    async def until(self, count: int) -> list[int]:
        with trio.fail_after(10):
            while len(self.numbers) < count:
                await self._changed.wait()
        return self.numbers


def _name_app(url: str, seen: Seen, *, name: str = "svc", **broker: Any) -> tuple[App, RedisBroker]:
    """An app ``name`` whose handler ``handle`` subscribes to ``orders`` by name."""
    app = App(name)
    redis = app.broker(RedisBroker(url, **broker))
    redis.subscriber("orders", name="handle")(seen.handle)
    return app, redis


async def _groups(redis: RedisClient, key: str = "orders") -> dict[str, int]:
    """Each group of ``key`` with its number of consumers."""
    groups: Any = await redis.execute("XINFO", "GROUPS", key)
    found = {}
    for group in groups:
        fields = (
            group if isinstance(group, dict) else dict(zip(group[::2], group[1::2], strict=True))
        )
        found[text(fields[b"name"])] = int(fields[b"consumers"])
    return found


async def test_a_name_subscribed_handler_receives_what_broker_publish_sends(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    seen = Seen()
    app, broker = _name_app(redis_server.url, seen)
    async with serving(app):
        for n in (1, 2, 3):
            await broker.publish("orders", n)
        assert await seen.until(3) == [1, 2, 3]
    assert await _groups(redis) == {"svc/handle": 1}  # named after the app (and handler)


async def test_the_brokers_group_is_the_group_of_a_name(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    seen = Seen()
    app, broker = _name_app(redis_server.url, seen, group="billing")
    async with serving(app):
        await broker.publish("orders", 1)
        assert await seen.until(1) == [1]
    assert await _groups(redis) == {"billing": 1}


async def test_two_apps_of_different_names_each_get_every_message(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    seen = {name: Seen() for name in ("billing", "shipping")}
    (billing, broker), (shipping, _) = (
        _name_app(redis_server.url, seen[name], name=name) for name in seen
    )
    async with serving(billing), serving(shipping):
        for n in range(1, 6):
            await broker.publish("orders", n)
        for each in seen.values():
            assert sorted(await each.until(5)) == [1, 2, 3, 4, 5]
    assert await _groups(redis) == {"billing/handle": 1, "shipping/handle": 1}


async def test_the_same_app_started_twice_shares_one_group(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    total = Seen()
    first, second = Seen(total), Seen(total)
    (one, broker), (two, _) = (_name_app(redis_server.url, seen) for seen in (first, second))
    async with serving(one), serving(two):

        async def two_consumers_of_one_group() -> bool:
            # A consumer joins its group at its first read, which follows the start.
            return await _groups(redis) == {"svc/handle": 2}

        await eventually(two_consumers_of_one_group, what="both apps reading group svc/handle")
        for n in range(1, 41):
            await broker.publish("orders", n)
        await total.until(40)
    # Each entry to one of them: together every one, once.
    assert sorted(first.numbers + second.numbers) == list(range(1, 41))


async def test_two_handlers_of_one_app_on_one_name_each_get_every_message(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen = {name: Seen() for name in ("bill", "ship")}
    for name, each in seen.items():
        broker.subscriber("orders", name=name)(each.handle)
    async with serving(app):
        for n in (1, 2, 3):
            await broker.publish("orders", n)
        for each in seen.values():
            assert await each.until(3) == [1, 2, 3]
    assert await _groups(redis) == {"svc/bill": 1, "svc/ship": 1}


async def test_a_restarted_app_resumes_with_what_was_published_while_it_was_down(
    redis_server: RedisServer,
) -> None:
    seen = Seen()
    app, broker = _name_app(redis_server.url, seen)
    async with serving(app):
        await broker.publish("orders", 1)
        await seen.until(1)
    publisher = App("publisher")
    other = publisher.broker(RedisBroker(redis_server.url))
    async with serving(publisher):
        for n in (2, 3):
            await other.publish("orders", n)  # while svc is down
    app, broker = _name_app(redis_server.url, seen)
    async with serving(app):
        await broker.publish("orders", 4)
        assert await seen.until(4) == [1, 2, 3, 4]


async def test_a_broker_declared_with_no_app_takes_the_group_of_the_app_that_runs_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    broker = RedisBroker(redis_server.url)
    seen = Seen()
    broker.subscriber("orders", name="handle")(seen.handle)
    (subscription,) = broker.subscriptions
    assert subscription.source == RedisStream("orders")  # no group until an app runs it
    for n, name in enumerate(("first", "second"), 1):  # registered on one app, then another
        app = App(name)
        app.broker(broker)
        async with serving(app):
            await broker.publish("orders", n)
            await seen.until(n)
    assert await _groups(redis) == {"first/handle": 1, "second/handle": 1}
