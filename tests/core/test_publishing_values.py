"""What a handler may return to its publishers, and what happens when a value cannot be encoded."""

import datetime as dt
import decimal
import enum
import logging
import uuid
from dataclasses import dataclass, field
from typing import Any

import pytest

from trio_streams import App, Context, EncodeError, MemoryBroker, MemoryStream, drop, retry


@dataclass
class Payment:
    id: int
    amount: float


@dataclass
class Charged:
    payment: int
    gateway: Any  # a handler bug: the gateway's response object, not its id


class Currency(enum.Enum):
    EUR = "EUR"


@dataclass
class Leg:
    amount: decimal.Decimal
    raw: bytes


@dataclass
class Receipt:
    id: uuid.UUID
    total: decimal.Decimal
    at: dt.datetime
    on: dt.date
    cutoff: dt.time
    tags: set[str]
    frozen: frozenset[int]
    currency: Currency
    legs: list[Leg] = field(default_factory=list)


def make_app() -> tuple[App, MemoryBroker]:
    app = App("svc")
    return app, app.broker(MemoryBroker())


async def test_an_unencodable_return_value_is_dead_lettered_at_once_and_the_handler_runs_once() -> (
    None
):
    app, broker = make_app()
    charges: list[int] = []

    @broker.subscriber(MemoryStream("payments"), max_attempts=3, dead_letter="payments.dead")
    @broker.publisher("charged")
    async def charge(payment: Payment) -> Charged:
        charges.append(payment.id)
        return Charged(payment.id, gateway=object())

    async with app.test() as t:
        await t.publish("payments", Payment(7, 9.5), headers={"trace": "abc"})
        assert charges == [7]
        record = t.handler(charge)
        assert record.settled == [drop()]
        assert [call.message for call in record.dead_lettered] == [Payment(7, 9.5)]
        assert isinstance(record.errors[0], EncodeError)
        assert t.published("charged") == []
        (letter,) = t.published("payments.dead")
        assert letter.json() == {"id": 7, "amount": 9.5}
        headers = dict(letter.headers)
        assert headers["trace"] == "abc"
        assert headers["x-dead-letter-reason"] == "unencodable"
        assert headers["x-dead-letter-attempts"] == "1"
        assert headers["x-dead-letter-error"].startswith(
            "EncodeError: cannot encode Charged as a payload: $.gateway: object is not encodable"
        )


async def test_without_a_dead_letter_an_unencodable_return_value_is_dropped_with_an_error_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app, broker = make_app()
    charges: list[int] = []

    @broker.subscriber(MemoryStream("payments"), max_attempts=3, name="charge")
    @broker.publisher("charged")
    async def charge(payment: Payment) -> Charged:
        charges.append(payment.id)
        return Charged(payment.id, gateway=object())

    async with app.test() as t:
        await t.publish("payments", Payment(1, 2.0))
        assert charges == [1]
        assert t.handler(charge).settled == [drop()]
        assert t.published("charged") == []
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert len(errors) == 1
    message = errors[0].getMessage()
    assert "charge: message at Position.sequence(1, stream='payments') dropped" in message
    assert "$.gateway: object is not encodable" in message
    assert "not run again" in message


async def test_an_unencodable_value_reaches_none_of_several_publishers() -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("payments"), dead_letter="payments.dead")
    @broker.publisher("audit")
    @broker.publisher("charged")
    async def charge(payment: Payment) -> Charged:
        return Charged(payment.id, gateway=object())

    async with app.test() as t:
        await t.publish("payments", Payment(1, 2.0))
        assert t.published("charged") == t.published("audit") == []
        assert len(t.published("payments.dead")) == 1


async def test_a_value_the_handler_itself_cannot_publish_is_a_handler_failure_and_retries() -> None:
    app, broker = make_app()

    @broker.subscriber(MemoryStream("payments"), max_attempts=2)
    async def charge(payment: Payment, ctx: Context) -> None:
        await ctx.publish("charged", Charged(payment.id, gateway=object()))

    async with app.test() as t:
        await t.publish("payments", Payment(1, 2.0))
        record = t.handler(charge)
        assert record.settled == [retry(), drop()]
        assert all(isinstance(e, EncodeError) for e in record.errors)


async def test_a_return_value_of_every_supported_type_is_published_and_handled_as_it_was() -> None:
    app, broker = make_app()
    receipt = Receipt(
        id=uuid.UUID(int=42),
        total=decimal.Decimal("19.90"),
        at=dt.datetime(2024, 5, 6, 7, 8, 9, tzinfo=dt.UTC),
        on=dt.date(2024, 5, 6),
        cutoff=dt.time(18),
        tags={"vip", "eu"},
        frozen=frozenset({1, 2}),
        currency=Currency.EUR,
        legs=[Leg(decimal.Decimal("19.90"), b"\x00\xffsig")],
    )
    seen: list[Receipt] = []

    @broker.subscriber(MemoryStream("payments"))
    @broker.publisher("receipts")
    async def charge(payment: Payment) -> Receipt:
        return receipt

    @broker.subscriber(MemoryStream("receipts"))
    async def file_receipt(got: Receipt) -> None:
        seen.append(got)

    async with app.test(raise_errors=True) as t:
        await t.publish("payments", Payment(1, 19.9))
        assert seen == [receipt]
        assert t.published("receipts")[0].json()["id"] == "00000000-0000-0000-0000-00000000002a"
