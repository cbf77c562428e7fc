"""On a real Redis consumer group: a ``by_key`` function that raises charges no attempt, runs
no handler, and the entry is dead-lettered at once with the reason ``by-key`` and acknowledged."""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient

from .support import entries, pending_count


@dataclass
class Order:
    id: int


async def test_a_by_key_that_raises_dead_letters_the_entry_at_once_charging_no_attempt(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    app = App("shop")
    broker = app.broker(RedisBroker(redis_server.url))
    ran: list[int] = []

    @broker.subscriber(
        RedisStream("orders", group="g", start=Position.beginning()),
        name="orders",
        workers=2,
        by_key=lambda o: o.customer,
        max_attempts=3,
        dead_letter="orders.dead",
        block=50,
    )
    async def handle(order: Order) -> None:
        ran.append(order.id)

    await redis.execute("XADD", "orders", "*", "_payload", '{"id": 7}')
    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with serving(app):

            async def dead_lettered() -> bool:
                return bool(await redis.execute("XLEN", "orders.dead"))

            await eventually(dead_lettered, within=10, what="the dead letter")

            async def acknowledged() -> bool:
                return await pending_count(redis, "orders", "g") == 0

            await eventually(acknowledged, within=10, what="an empty pending list")
    [(_, fields)] = await entries(redis, "orders.dead")
    assert fields["h:x-dead-letter-reason"] == b"by-key"
    assert fields["h:x-dead-letter-attempts"] == b"0"
    assert fields["h:x-dead-letter-error"].startswith(b"AttributeError")
    assert ran == []
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("orders: by_key raised on the message") for m in messages), messages
    assert not any("handler failed" in m for m in messages), messages
