"""Apps whose handlers answer requests (they return a value) and whose handlers do not, for the
AsyncAPI tests of request-reply."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NoReturn

import msgspec
import pydantic

from trio_streams import App, MemoryBroker, MemoryStream, Middleware, Outcome, ack, drop
from trio_streams.file import FileBroker, FileStream
from trio_streams.redis import RedisBroker, RedisStream


@dataclass
class Order:
    id: int
    amount: float


class Receipt(msgspec.Struct):
    order: int
    paid: bool


class Quote(pydantic.BaseModel):
    order: int
    price: float


app = App("billing")
redis = app.broker(RedisBroker("redis://cache.internal:6380/0"))
files = app.broker(FileBroker("billing.ss"))


@redis.subscriber(RedisStream("orders", group="billing"))
async def bill(order: Order) -> Receipt:
    """Charge an order; the caller gets its receipt."""
    return Receipt(order=order.id, paid=True)


@redis.subscriber(RedisStream("quotes", group="billing"))
async def quote(order: Order) -> Quote:
    return Quote(order=order.id, price=order.amount)


@redis.subscriber(RedisStream("maybe", group="billing"))
async def maybe_bill(order: Order) -> Receipt | None:
    """None replies null."""
    return None if order.id < 0 else Receipt(order=order.id, paid=True)


@redis.subscriber(RedisStream("checks", group="billing"))
async def check(order: Order) -> Receipt | Outcome:
    """ack() replies null; drop() replies the failure."""
    return drop() if order.id < 0 else Receipt(order=order.id, paid=False)


@redis.subscriber(RedisStream("labels", group="billing"))
async def label(order: Order) -> str:
    return f"order {order.id}"


@redis.subscriber(RedisStream("audit", group="billing"))
async def audit(order: Order) -> None: ...


@redis.subscriber(RedisStream("settle", group="billing"))
async def settle(order: Order) -> Outcome:
    return ack()


@redis.subscriber(RedisStream("stop", group="billing"))
async def stop(order: Order) -> NoReturn:
    raise SystemExit(0)


@redis.subscriber(RedisStream("batches", group="billing"), batch=10)
async def batch(orders: list[Order]) -> None: ...


@redis.subscriber(RedisStream("untyped", group="billing"))
async def untyped(order: Order):  # type: ignore[no-untyped-def]
    return order


# A stream named as the server's channel of replies would be: the replies keep their own key.
@redis.subscriber(RedisStream("replies", group="billing"))
async def misnamed(order: Order) -> None: ...


@files.subscriber(FileStream("orders").replay())
async def replay(order: Order) -> bytes:
    return b"%d" % order.id


def memory_app(*middlewares: Middleware) -> App:
    """An in-process app whose handlers answer requests (``answer`` fails for a negative
    order), its broker wrapped in ``middlewares``."""
    app = App("memory")
    memory = app.broker(MemoryBroker(middlewares=middlewares))

    @memory.subscriber(MemoryStream("orders"), max_attempts=1, name="answer")
    async def answer(order: Order) -> Receipt:
        if order.id < 0:
            raise ValueError(f"order {order.id} is negative")
        return Receipt(order=order.id, paid=True)

    @memory.subscriber(MemoryStream("eu", "us"), name="regions")
    async def regions(order: Order) -> Receipt:
        return Receipt(order=order.id, paid=True)

    return app
