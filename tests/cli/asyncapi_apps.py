"""An app with every kind of channel, for the AsyncAPI tests."""

from __future__ import annotations

import enum
from dataclasses import dataclass

import msgspec
import pydantic

from trio_streams import App, Destination
from trio_streams.file import FileBroker, FileStream
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream


class Currency(enum.Enum):
    EUR = "EUR"
    USD = "USD"


@dataclass
class Order:
    id: int
    amount: float
    currency: Currency


class Receipt(msgspec.Struct):
    order: int
    paid: bool


class Headline(pydantic.BaseModel):
    title: str
    tags: list[str] = []


app = App("shop")
redis = app.broker(RedisBroker("redis://:secret@cache.internal:6380/0"))
log = app.broker(FileBroker("orders.ss"))
receipts = redis.publisher("receipts")
audit = redis.publisher(Destination.list("audit"))


@redis.subscriber(RedisStream("orders", group="billing"))
@receipts
async def bill(order: Order) -> Receipt:
    """Charge an order and publish its receipt."""
    return Receipt(order=order.id, paid=True)


@redis.subscriber(RedisList("jobs", reliable=True))
async def work(job: bytes) -> None: ...


@redis.subscriber(RedisChannel("news.*", pattern=True))
async def show(headline: Headline) -> None: ...


@redis.subscriber(RedisChannel("prices", sharded=True))
async def price(batch: list[int]) -> None: ...


@log.subscriber(FileStream("orders").replay())
async def replay(order: Order) -> None: ...
