"""Under ``app.test()`` the in-process transport records each delivery's segment and whether it
was kept, so side effects are asserted without Redis — with the real broker's refusals."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from trio_streams import App, Context, Outcome, Pipeline, SegmentClosed, ack, drop
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis import RedisBroker, RedisStream


@dataclass
class Order:
    id: int
    amount: float


def _app() -> tuple[App, RedisBroker]:
    app = App("orders")
    return app, app.broker(RedisBroker("redis://127.0.0.1:1"))


async def test_the_in_process_window_records_the_segments_the_window_would_send() -> None:
    app, redis = _app()

    @redis.subscriber(RedisStream("orders", group="g"), pipeline=True, atomic=True)
    async def total(order: Order, ctx: Context) -> Outcome:
        ctx.pipeline.incrbyfloat(f"total:{order.id}", order.amount)
        return ack() if order.amount > 0 else drop()

    async with app.test() as t:
        await t.publish("orders", Order(1, 2.0))
        await t.publish("orders", Order(2, -1.0))
        assert t.handler(total).segments == [[("INCRBYFLOAT", "total:1", "2.0")]]
        assert t.handler(total).discarded_segments == [[("INCRBYFLOAT", "total:2", "-1.0")]]
        assert [s.decided_by for s in t.handler(total).segment_records] == ["ack", "drop"]


async def test_in_process_a_segment_refuses_what_the_real_window_refuses() -> None:
    app, redis = _app()
    refused: list[str] = []

    @redis.subscriber(RedisStream("orders", group="g"), pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        try:
            ctx.pipeline.blpop("queue", 0)
        except ConfigurationError as exc:
            refused.append(str(exc))
        ctx.pipeline.set("ok", n)

    async with app.test() as t:
        await t.publish("orders", 1)
        assert t.handler(handle).segments == [[("SET", "ok", "1")]]
    assert len(refused) == 1 and "blocks" in refused[0]


async def test_in_process_a_segment_used_after_its_handler_returned_refuses_commands() -> None:
    app, redis = _app()
    kept: list[tuple[Pipeline, Context]] = []

    @redis.subscriber(RedisStream("orders", group="g"), pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.set("k", n)
        kept.append((ctx.pipeline, ctx))

    async with app.test() as t:
        await t.publish("orders", 1)
        pipeline, ctx = kept[0]
        with pytest.raises(SegmentClosed, match="never sent"):
            pipeline.set("late", 1)
        with pytest.raises(SegmentClosed, match="already settled"):
            ctx.pipeline.set("late", 1)
        assert t.handler(handle).segments == [[("SET", "k", "1")]]
