"""Apps whose messages are text, bytes and JSON, and whose subscriptions dead-letter, for the
AsyncAPI tests. ``RECEIPTS_FILE`` names the stream file ``receipts`` runs on."""

from __future__ import annotations

import os
from dataclasses import dataclass

from trio_streams import App, Outcome, retry
from trio_streams.file import FileBroker, FileStream
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream


@dataclass
class Order:
    id: int


receipts = App("receipts")
receipts_log = receipts.broker(FileBroker(os.environ.get("RECEIPTS_FILE", "receipts.ss")))


@receipts_log.subscriber(FileStream("in").replay(), dead_letter="in.dead")
@receipts_log.publisher("out")
async def receipt(order: dict[str, int]) -> str:
    """Write a receipt as a line of text."""
    return f"receipt {order['k']}: 5.50"


kinds = App("kinds")
kinds_log = kinds.broker(FileBroker("kinds.ss"))


@kinds_log.subscriber(FileStream("text").replay())
@kinds_log.publisher("raw")
async def text_to_bytes(line: str) -> bytes:
    return line.encode()


@kinds_log.subscriber(FileStream("raw").replay())
@kinds_log.publisher("orders")
async def bytes_to_order(raw: bytes) -> Order:
    return Order(id=len(raw))


@kinds_log.subscriber(FileStream("orders").replay())
@kinds_log.publisher("totals")
async def order_to_dict(order: Order) -> dict[str, int]:
    return {"id": order.id}


maybe = App("maybe")
maybe_log = maybe.broker(FileBroker("maybe.ss"))


@maybe_log.subscriber(FileStream("lines").replay())
@maybe_log.publisher("kept")
async def keep(line: str) -> str | None:
    """None publishes nothing: what is published is text."""
    return line or None


@maybe_log.subscriber(FileStream("orders").replay())
@maybe_log.publisher("checked")
async def check(order: Order) -> Order | Outcome:
    """An outcome settles the delivery and publishes nothing."""
    return order if order.id else retry()


redis_app = App("redis-dead-letters")
redis = redis_app.broker(RedisBroker("redis://127.0.0.1:6390"))


@redis.subscriber(RedisStream("orders", group="billing"), dead_letter="orders.dead")
async def bill(order: Order) -> None: ...


@redis.subscriber(RedisList("jobs"), dead_letter="jobs.dead")
async def work(job: str) -> None: ...


@redis.subscriber(RedisList("tasks", pop="right"), dead_letter="tasks.dead")
async def task(job: bytes) -> None: ...


@redis.subscriber(RedisList("queue", dead_letter_kind="stream"), dead_letter="queue.dead", batch=10)
async def drain(jobs: list[Order]) -> None: ...


@redis.subscriber(RedisChannel("news"), dead_letter="news.dead")
async def show(line: str) -> None: ...


@redis.subscriber(RedisChannel("prices", sharded=True), dead_letter="prices.dead")
async def price(value: int) -> None: ...


@redis.subscriber(RedisChannel("alerts", dead_letter_kind="stream"), dead_letter="alerts.dead")
async def alert(order: Order) -> None: ...


@redis.subscriber(RedisStream("refunds"), dead_letter="orders.dead")
async def refund(order: Order) -> None: ...
