"""Apps whose handlers read one broker and publish through another, for the AsyncAPI tests."""

from __future__ import annotations

import msgspec

from trio_streams import App, Destination, Router
from trio_streams.file import FileBroker
from trio_streams.redis import RedisBroker, RedisStream


class Order(msgspec.Struct):
    id: int


class Receipt(msgspec.Struct):
    order: int
    paid: bool


# A Redis group in, a stream file out: the file broker has a publisher and no subscriber.
redis_to_file = App("redis-to-file")
redis = redis_to_file.broker(RedisBroker("redis://cache.internal:6380/0"))
files = redis_to_file.broker(FileBroker("shop.ss"))


@redis.subscriber(RedisStream("orders", group="g"))
@files.publisher("receipts")
async def bill(order: Order) -> Receipt:
    return Receipt(order=order.id, paid=True)


# Two Redis brokers (both named "redis" by default): read on one, write a list on the other.
two_redis = App("two-redis")
primary = two_redis.broker(RedisBroker("redis://primary.internal:6379/0"))
archive = two_redis.broker(RedisBroker("redis://archive.internal:6379/0"))


@primary.subscriber(RedisStream("orders", group="g"))
@archive.publisher(Destination.list("receipts"))
async def archive_receipt(order: Order) -> Receipt:
    return Receipt(order=order.id, paid=False)


# A handler with a publisher on each broker: its own (a Redis stream) and a stream file.
both = App("both")
both_redis = both.broker(RedisBroker("redis://cache.internal:6380/0"))
both_files = both.broker(FileBroker("shop.ss"))


@both_redis.subscriber(RedisStream("orders", group="g"))
@both_redis.publisher("receipts")
@both_files.publisher("receipts")
async def bill_twice(order: Order) -> Receipt:
    return Receipt(order=order.id, paid=True)


# A handler decorated with a publisher of a router that no broker includes.
unmounted = App("unmounted")
unmounted_redis = unmounted.broker(RedisBroker("redis://cache.internal:6380/0"))
nowhere = Router().publisher("receipts")


@unmounted_redis.subscriber(RedisStream("orders", group="g"))
@nowhere
async def bill_nowhere(order: Order) -> Receipt:
    return Receipt(order=order.id, paid=True)
