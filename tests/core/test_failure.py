"""Outcomes, failure and decode policies, retry caps, dead letters and delayed retries."""

from dataclasses import dataclass
from typing import Annotated

import pytest
import trio

from trio_streams import (
    RETRY_COUNT_HEADER,
    App,
    Context,
    Depends,
    Header,
    MemoryBroker,
    MemoryStream,
    ack,
    drop,
    retry,
    retry_after,
)


@dataclass
class Order:
    id: int
    amount: float


def make_app(**options: object) -> tuple[App, MemoryBroker]:
    app = App("svc")
    return app, app.broker(MemoryBroker(**options))  # type: ignore[arg-type]


async def test_returning_none_acks_and_outcomes_are_recorded() -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> object:
        return {0: None, 1: ack(), 2: drop()}[n]

    async with app.test() as t:
        for n in range(3):
            await t.publish("s", n)
        assert t.handler(handle).outcomes == [ack(), ack(), drop()]
        assert t.handler(handle).messages == [0, 1, 2]


async def test_an_exception_retries_up_to_the_cap_then_dead_letters_intact() -> None:
    app, broker = make_app()
    attempts: list[int] = []

    @broker.subscriber(MemoryStream("orders"), max_attempts=3, dead_letter="orders.dead")
    async def handle(order: Order, ctx: Context) -> None:
        attempts.append(ctx.attempt)
        raise RuntimeError("payment service down")

    async with app.test() as t:
        payload = b'{"id": 7, "amount": 9.5}'
        await t.publish("orders", payload, headers={"trace": "abc", "x-weird": "  spaced  "})
        record = t.handler(handle)
        assert record.outcomes == [retry(), retry(), retry()]
        assert record.settled == [retry(), retry(), drop()]
        assert [type(e) for e in record.errors] == [RuntimeError] * 3
        dead = t.published("orders.dead")
        # As the last delivery arrived, less its retry count (said apart, as the attempts), and
        # why: the dead-letter stream's readers handle it afresh.
        [letter] = dead
        assert letter.payload == payload
        headers = dict(letter.headers)
        assert {k: headers[k] for k in ("trace", "x-weird")} == {
            "trace": "abc",
            "x-weird": "  spaced  ",
        }
        assert RETRY_COUNT_HEADER not in headers
        assert headers["x-dead-letter-attempts"] == "3"
        assert headers["x-dead-letter-reason"] == "max-attempts"
        assert headers["x-dead-letter-error"] == "RuntimeError: payment service down"
        assert headers["x-dead-letter-attempts"] == "3"
        assert headers["x-dead-letter-stream"] == "orders"
        assert headers["x-dead-letter-position"] == "sequence:3"
        assert headers["x-dead-letter-subscription"] == record.name
        assert int(headers["x-dead-letter-at-ms"]) > 1_700_000_000_000
        copies = [dict(m.headers).get(RETRY_COUNT_HEADER) for m in t.published("orders")]
        assert copies == [None, "1", "2"]
        assert len(record.dead_lettered) == 1
    assert attempts == [1, 2, 3]


async def test_without_a_dead_letter_a_spent_delivery_is_dropped_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("s"), max_attempts=2)
    async def handle(n: int) -> object:
        return retry()

    async with app.test() as t:
        await t.publish("s", 1)
        assert t.handler(handle).settled == [retry(), drop()]
    assert "dropped after 2 attempt(s)" in caplog.text


async def test_max_attempts_one_means_no_retry() -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("s"), max_attempts=1)
    async def handle(n: int) -> None:
        raise ValueError

    async with app.test() as t:
        await t.publish("s", 1)
        assert t.handler(handle).settled == [drop()]


async def test_an_undecodable_payload_is_dropped_with_the_reason_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("orders"), name="orders")
    async def handle(order: Order) -> None:
        raise AssertionError("never called")

    async with app.test() as t:
        await t.publish("orders", b'{"id": "seven"}')
        record = t.handler(handle)
        assert record.settled == [drop()]
        assert record.calls == []  # the handler never saw it
        [skipped] = record.skipped
        assert skipped.message is None and not skipped.called
    assert (
        "orders: cannot decode the message at Position.sequence(1, stream='orders')" in caplog.text
    )
    assert "$.id: expected an integer, got str 'seven'" in caplog.text


async def test_an_undecodable_payload_goes_to_the_dead_letter_when_one_is_set() -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("orders"), dead_letter="dlq", max_attempts=5)
    async def handle(order: Order) -> None:
        raise AssertionError("never called")

    async with app.test() as t:
        await t.publish("orders", b"\xff\xfe", headers={"h": "v"})
        record = t.handler(handle)
        assert record.call_count == 0 and len(record.records) == 1  # never called, never retried
        [letter] = t.published("dlq")
        assert letter.payload == b"\xff\xfe"
        assert letter.headers["h"] == "v"
        assert letter.headers["x-dead-letter-reason"] == "undecodable"
        assert letter.headers["x-dead-letter-error"].startswith("DecodeError: ")
        assert letter.headers["x-dead-letter-attempts"] == "1"


async def test_a_payload_with_a_missing_field_names_the_field_in_the_log_and_dead_letter(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("orders"), dead_letter="dlq")
    async def handle(order: Order) -> None:
        raise AssertionError("never called")

    async with app.test() as t:
        await t.publish("orders", b"{}")
        [letter] = t.published("dlq")
    error = letter.headers["x-dead-letter-error"]
    assert error == (
        "DecodeError: cannot decode payload: $: Object missing required field `id` of Order"
    )
    assert "Object missing required field `id`" in caplog.text
    assert "got null" not in caplog.text


async def test_a_missing_header_runs_the_decode_policy() -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("s"), dead_letter="dlq")
    async def handle(n: int, tenant: Annotated[str, Header("tenant")]) -> None: ...

    async with app.test() as t:
        await t.publish("s", 1)
        assert len(t.published("dlq")) == 1


async def test_a_failing_extractor_runs_the_failure_policy() -> None:
    app, broker = make_app()

    def lookup(ctx: Context) -> str:
        raise LookupError("tenant registry unavailable")

    @broker.subscriber(MemoryStream("s"), max_attempts=2)
    async def handle(n: int, tenant: Annotated[str, Depends(lookup)]) -> None: ...

    async with app.test() as t:
        await t.publish("s", 1)
        record = t.handler(handle)
        assert record.settled == [retry(), drop()]
        assert all(isinstance(e, LookupError) for e in record.errors)


async def test_retry_after_waits_on_trios_clock(autojump_clock: trio.abc.Clock) -> None:
    app, broker = make_app()
    times: list[float] = []

    @broker.subscriber(MemoryStream("s"), max_attempts=3)
    async def handle(n: int, ctx: Context) -> object:
        times.append(trio.current_time())
        return retry_after(60) if ctx.attempt < 3 else ack()

    async with app.test() as t:
        start = trio.current_time()
        await t.publish("s", 1)
        assert len(times) == 1  # settled: the retry is not due yet
        await t.wait(60)
        assert len(times) == 2
        await t.wait(60)
        assert [round(x - start) for x in times] == [0, 60, 120]
        assert t.handler(handle).outcomes == [retry_after(60), retry_after(60), ack()]


async def test_retry_delay_applies_to_failures(autojump_clock: trio.abc.Clock) -> None:
    app, broker = make_app()
    times: list[float] = []

    @broker.subscriber(MemoryStream("s"), max_attempts=4, retry_delay=lambda attempt: 2.0**attempt)
    async def handle(n: int) -> None:
        times.append(trio.current_time())
        raise RuntimeError

    async with app.test() as t:
        start = trio.current_time()
        await t.publish("s", 1)
        await t.wait(100)
    assert [round(x - start) for x in times] == [0, 2, 6, 14]


async def test_publisher_publishes_the_return_value_of_its_handler() -> None:
    app, broker = make_app()
    totals = broker.publisher("totals", headers={"source": "pricing"})

    @totals
    @broker.subscriber(MemoryStream("orders"))
    async def price(order: Order) -> float:
        return order.amount * 2

    @broker.subscriber(MemoryStream("refunds"))
    @broker.publisher("audit")
    @broker.publisher("totals")
    async def refund(order: Order) -> dict[str, int]:
        return {"refund": order.id}

    async with app.test() as t:
        await t.publish("orders", Order(1, 2.5))
        await t.publish("refunds", Order(2, 1.0))
        assert [(m.json(), dict(m.headers)) for m in t.published("totals")] == [
            (5.0, {"source": "pricing"}),
            ({"refund": 2}, {}),
        ]
        assert [m.json() for m in t.published("audit")] == [{"refund": 2}]


async def test_an_outcome_returned_is_not_published() -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("s"))
    @broker.publisher("out")
    async def handle(n: int) -> object:
        return drop()

    async with app.test() as t:
        await t.publish("s", 1)
        assert t.published("out") == []
