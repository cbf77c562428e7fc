"""Apps whose handlers read one broker and publish through another, for the AsyncAPI tests."""

from __future__ import annotations

import msgspec

from trio_streams import App, Broker, Destination, Router
from trio_streams.file import FileBroker
from trio_streams.redis import RedisBroker, RedisStream


class Order(msgspec.Struct):
    id: int


class Receipt(msgspec.Struct):
    order: int
    paid: bool


def billing(
    name: str,
    reads: str,
    writes: Router,
    receipts: str | Destination = "receipts",
    *,
    also_where_it_reads: bool = False,
) -> App:
    """An app whose handler ``bill`` reads the group ``g`` of the stream ``orders`` at the Redis
    URL ``reads`` and publishes its ``Receipt`` to ``receipts`` through ``writes`` (registered on
    the app when it is a broker), and with ``also_where_it_reads`` to the stream ``receipts`` of
    the broker it reads too."""
    app = App(name)
    redis = app.broker(RedisBroker(reads))
    if isinstance(writes, Broker):
        app.broker(writes)

    async def bill(order: Order) -> Receipt:
        return Receipt(order=order.id, paid=True)

    handler = writes.publisher(receipts)(bill)
    if also_where_it_reads:
        handler = redis.publisher("receipts")(handler)
    redis.subscriber(RedisStream("orders", group="g"), name="bill")(handler)
    return app


#: A Redis group in, a stream file out: the file broker has a publisher and no subscriber.
redis_to_file = billing("redis-to-file", "redis://cache.internal:6380/0", FileBroker("shop.ss"))
#: Two Redis brokers (both named "redis" by default): read on one, write a list on the other.
two_redis = billing(
    "two-redis",
    "redis://primary.internal:6379/0",
    RedisBroker("redis://archive.internal:6379/0"),
    Destination.list("receipts"),
)
#: A publisher on each broker: the Redis one the handler reads, and a stream file.
both = billing(
    "both", "redis://cache.internal:6380/0", FileBroker("shop.ss"), also_where_it_reads=True
)
#: A publisher of a router that no broker includes.
unmounted = billing("unmounted", "redis://cache.internal:6380/0", Router())
