"""A ``by_key`` function that raises is not the handler failing: no attempt is charged, the
handler never runs, and the message is settled by the decode policy with a reason naming
by_key."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import pytest

from trio_streams import App, MemoryBroker, MemoryStream, drop


@dataclass
class Order:
    id: int


def app_with(**options: object) -> tuple[App, MemoryBroker, list[int]]:
    app = App("shop")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []

    @broker.subscriber(
        MemoryStream("orders"),
        workers=2,
        by_key=lambda o: o.customer,
        name="orders",
        **options,  # type: ignore[arg-type]
    )
    async def handle(order: Order) -> None:
        seen.append(order.id)

    return app, broker, seen


async def logged_for_one_order(app: App, caplog: pytest.LogCaptureFixture) -> list[str]:
    """What trio-streams logs at WARNING and above while ``app`` handles one order."""
    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with app.test() as t:
            await t.publish("orders", Order(1))
    return [r.getMessage() for r in caplog.records if r.name.startswith("trio_streams")]


async def test_a_by_key_that_raises_is_logged_as_by_key_raised_naming_the_subscription(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, _, seen = app_with()
    messages = await logged_for_one_order(app, caplog)
    raised = [m for m in messages if "by_key raised" in m]
    assert len(raised) == 1, messages
    assert raised[0].startswith("orders: by_key raised on the message"), raised
    assert "AttributeError" in raised[0] and "customer" in raised[0], raised
    assert not any("handler failed" in m for m in messages), messages
    assert seen == []


async def test_a_by_key_that_raises_is_charged_no_attempt_and_never_runs_the_handler() -> None:
    app, _, seen = app_with(max_attempts=3)
    async with app.test() as t:
        await t.publish("orders", Order(1))
        record = t.handler("orders")
        assert seen == [] and record.calls == []
        assert len(record.records) == 1  # settled once: no retries, so no further attempts
        assert record.settled == [drop()]
        assert record.records[0].delivery.attempt == 1


async def test_a_by_key_that_raises_is_dead_lettered_with_a_reason_naming_by_key() -> None:
    app, _, seen = app_with(dead_letter="orders.dead")
    async with app.test() as t:
        await t.publish("orders", Order(7))
        (letter,) = t.published("orders.dead")
        assert letter.json() == {"id": 7}
        assert letter.headers["x-dead-letter-reason"] == "by-key"
        assert letter.headers["x-dead-letter-attempts"] == "0"
        assert "AttributeError" in letter.headers["x-dead-letter-error"]
    assert seen == []


async def test_without_a_dead_letter_it_is_dropped_and_the_log_says_so(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, _, _ = app_with()
    messages = await logged_for_one_order(app, caplog)
    assert any("by_key raised" in m and m.endswith("dropped") for m in messages), messages


async def test_the_keys_that_work_still_run_in_their_lanes_beside_one_that_raises() -> None:
    app = App("shop")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []

    @broker.subscriber(
        MemoryStream("orders"), workers=2, by_key=lambda o: 10 // o.id, dead_letter="dead"
    )
    async def handle(order: Order) -> None:
        seen.append(order.id)

    async with app.test() as t:
        for n in (1, 0, 2):  # 10 // 0 raises
            await t.publish("orders", Order(n))
        assert sorted(seen) == [1, 2]
        assert [m.json() for m in t.published("dead")] == [{"id": 0}]
        assert t.published("dead")[0].headers["x-dead-letter-reason"] == "by-key"


async def test_an_unhashable_key_is_settled_as_a_by_key_that_raised() -> None:
    app = App("shop")
    broker = app.broker(MemoryBroker())

    def unhashable(order: Order) -> Any:
        return [order.id]

    @broker.subscriber(MemoryStream("orders"), workers=2, by_key=unhashable, dead_letter="d")
    async def handle(order: Order) -> None: ...

    async with app.test() as t:
        await t.publish("orders", Order(1))
        assert t.handler(handle).calls == []
        assert t.published("d")[0].headers["x-dead-letter-reason"] == "by-key"


async def test_the_record_lists_it_as_skipped_with_by_keys_error() -> None:
    app, _, _ = app_with()
    async with app.test() as t:
        await t.publish("orders", Order(1))
        record = t.handler("orders")
        (skipped,) = record.skipped
        assert not skipped.called and skipped.message is None
        assert [type(e) for e in record.errors] == [AttributeError]
