"""Request-reply on the in-process transport and under ``app.test()``: ``broker.request`` and
``t.request`` return what the handler that takes the request returned, at its message's final
outcome; a failure is a ``RemoteError``, silence a ``RequestTimeout`` on Trio's clock; late
replies are dropped and counted; cancellation and shutdown leave nothing waiting."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import (
    App,
    ConfigurationError,
    Context,
    Destination,
    Header,
    Headers,
    MemoryBroker,
    MemoryStream,
    NoResponders,
    RemoteError,
    Reply,
    ReplyLost,
    RequestTimeout,
    ack,
    drop,
    retry,
)
from trio_streams.core.broker import Broker
from trio_streams.core.replies import CORRELATION_HEADER, REPLY_TO_HEADER
from trio_streams.file import FileBroker, FileStream
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream


@dataclass
class Quote:
    sku: str
    qty: int


@dataclass
class Price:
    sku: str
    total: float


def pricing_app(broker: Broker, source: Any) -> App:
    app = App("pricing")
    app.broker(broker)

    @broker.subscriber(source)
    async def price(quote: Quote) -> Price:
        return Price(quote.sku, quote.qty * 2.5)

    return app


# ---- 1. t.request under app.test(), and broker.request from a handler --------------------------


async def test_t_request_returns_the_reply_as_a_reply_or_decoded_to_reply_type() -> None:
    broker = MemoryBroker()
    app = pricing_app(broker, MemoryStream("quotes"))
    async with app.test() as t:
        reply = await t.request("quotes", Quote("tea", 4))
        assert isinstance(reply, Reply)
        assert reply.json() == {"sku": "tea", "total": 10.0}
        assert reply.decode(Price) == Price("tea", 10.0)
        assert await t.request("quotes", Quote("tea", 2), reply_type=Price) == Price("tea", 5.0)
        assert broker.requests_in_flight == 0


async def test_t_request_refuses_a_destination_nothing_reads_as_t_publish_does() -> None:
    app = pricing_app(MemoryBroker(), MemoryStream("quotes"))
    async with app.test() as t:
        with pytest.raises(ConfigurationError, match="quotes") as refused:
            await t.request("qoutes", Quote("tea", 1))
        with pytest.raises(ConfigurationError) as published:
            await t.publish("qoutes", Quote("tea", 1))
        assert str(refused.value) == str(published.value)
        assert t.published("quotes") == []  # refused before anything was published


async def test_t_request_to_an_unread_destination_with_unread_ok_times_out(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = pricing_app(MemoryBroker(), MemoryStream("quotes"))
    async with app.test() as t:
        with pytest.raises(RequestTimeout, match="stream 'nobody'"):
            await t.request("nobody", Quote("tea", 1), timeout=3, unread_ok=True)
        assert len(t.published("nobody")) == 1


async def test_a_handler_failing_answers_remote_error_under_app_test() -> None:
    app = App("pricing")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"), max_attempts=2)
    async def price(quote: Quote) -> Price:
        raise LookupError(f"no price for {quote.sku}")

    async with app.test() as t:
        with pytest.raises(RemoteError) as failed:
            await t.request("quotes", Quote("gold", 1))
        error = failed.value
        assert (error.type, error.message) == ("LookupError", "no price for gold")
        assert (error.reason, error.attempts) == ("max-attempts", 2)
        assert error.handler == t.handler(price).name
        assert "Traceback" not in str(error)
        assert t.handler(price).call_count == 2


async def test_a_request_nobody_answers_times_out_on_trios_clock(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("pricing")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"))
    async def price(quote: Quote) -> None:
        await trio.sleep_forever()

    async with app.test() as t:
        start = trio.current_time()
        with pytest.raises(RequestTimeout) as timed_out:
            await t.request("quotes", Quote("tea", 1), timeout=7)
        assert trio.current_time() - start == pytest.approx(7)
        assert isinstance(timed_out.value, trio.TooSlowError)
        assert timed_out.value.timeout == 7
        assert broker.requests_in_flight == 0


@pytest.mark.parametrize(
    ("make", "source"),
    [
        (lambda path: MemoryBroker(), MemoryStream("quotes")),
        (lambda path: FileBroker(path), FileStream("quotes")),
        (lambda path: RedisBroker("redis://127.0.0.1:1"), RedisStream("quotes", group="g")),
        (lambda path: RedisBroker("redis://127.0.0.1:1"), RedisList("quotes")),
        (lambda path: RedisBroker("redis://127.0.0.1:1"), RedisChannel("quotes")),
    ],
    ids=["memory", "file", "redis-stream", "redis-list", "redis-channel"],
)
async def test_t_request_works_for_memory_file_and_redis_handlers_without_a_server(
    make: Any, source: Any, tmp_path: Any
) -> None:
    path = tmp_path / "never.ss"
    app = pricing_app(make(path), source)
    destination = (
        Destination.list("quotes")
        if isinstance(source, RedisList)
        else Destination.channel("quotes")
        if isinstance(source, RedisChannel)
        else "quotes"
    )
    async with app.test() as t:
        assert await t.request(destination, Quote("tea", 4), reply_type=Price) == Price("tea", 10.0)
    assert not path.exists()  # the file broker's app.test() touched no file


async def test_a_request_to_a_channel_nobody_hears_fails_at_once_with_no_responders(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = pricing_app(RedisBroker("redis://127.0.0.1:1"), RedisChannel("quotes"))
    async with app.test() as t:
        start = trio.current_time()
        with pytest.raises(NoResponders, match="no subscriber received it"):
            await t.request(Destination.channel("nobody"), Quote("tea", 1), unread_ok=True)
        assert trio.current_time() == start  # not the timeout: at once


async def test_with_raise_errors_a_failed_request_is_its_remote_error_and_not_raised_again() -> (
    None
):
    app = App("pricing")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"), max_attempts=1)
    async def price(quote: Quote) -> Price:
        if quote.qty < 0:
            raise ValueError("negative")
        return Price(quote.sku, quote.qty * 2.5)

    async with app.test(raise_errors=True) as t:
        with pytest.raises(RemoteError, match="negative"):
            await t.request("quotes", Quote("tea", -1))
        # The handler's error was answered as that RemoteError: the next call does not raise it.
        assert await t.request("quotes", Quote("tea", 1), reply_type=Price) == Price("tea", 2.5)
        await t.publish("quotes", Quote("tea", 2))


async def test_a_handler_may_request_another_service_under_app_test() -> None:
    app = App("shop")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"))
    async def price(quote: Quote) -> Price:
        return Price(quote.sku, quote.qty * 2.5)

    @broker.subscriber(MemoryStream("orders"))
    async def order(quote: Quote) -> str:
        priced = await broker.request(quote, "quotes", reply_type=Price, timeout=5)
        return f"{priced.sku}: {priced.total}"

    async with app.test() as t:
        assert await t.request("orders", Quote("tea", 2), reply_type=str) == "tea: 5.0"
        t.handler(price).assert_called_once_with(Quote("tea", 2))


async def test_a_handler_may_request_another_service_live_with_the_memory_broker() -> None:
    app = App("shop")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"))
    async def price(quote: Quote) -> Price:
        return Price(quote.sku, quote.qty * 2.5)

    @broker.subscriber(MemoryStream("orders"), workers=4)
    async def order(quote: Quote) -> str:
        priced = await broker.request(quote, "quotes", reply_type=Price, timeout=5)
        return f"{priced.sku}: {priced.total}"

    with trio.fail_after(10):
        async with serving(app):
            answers = [
                await broker.request(Quote(sku, n), "orders", reply_type=str)
                for n, sku in enumerate(["tea", "rye"], 1)
            ]
    assert answers == ["tea: 2.5", "rye: 5.0"]
    assert broker.requests_in_flight == 0


# ---- 2. handlers need no change: what each outcome answers --------------------------------------


async def test_a_handler_returning_none_answers_null() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []

    @broker.subscriber(MemoryStream("jobs"))
    async def job(n: int) -> None:
        seen.append(n)

    async with app.test() as t:
        reply = await t.request("jobs", 1)
        assert reply.payload == b"null"
        assert reply.json() is None
    assert seen == [1]


async def test_a_handler_returning_ack_answers_null() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("jobs"))
    @broker.publisher("done")
    async def job(n: int) -> Any:
        return ack()

    async with app.test() as t:
        assert (await t.request("jobs", 1)).json() is None
        assert t.published("done") == []  # an outcome is not a value: nothing published


@pytest.mark.parametrize("max_attempts", [1, 3])
async def test_a_handler_returning_drop_answers_remote_error_dropped(max_attempts: int) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("jobs"), max_attempts=max_attempts, dead_letter="jobs.dead")
    async def job(n: int) -> Any:
        return drop()

    async with app.test() as t:
        with pytest.raises(RemoteError) as failed:
            await t.request("jobs", 1)
        assert (failed.value.reason, failed.value.type, failed.value.attempts) == (
            "dropped",
            "Dropped",
            1,
        )
        assert t.published("jobs.dead") == []  # drop() drops: no dead letter


async def test_retry_answers_later_with_the_retried_runs_outcome(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    attempts: list[int] = []

    @broker.subscriber(MemoryStream("jobs"), max_attempts=3)
    async def job(n: int, ctx: Context) -> Any:
        attempts.append(ctx.attempt)
        if ctx.attempt < 3:
            return retry()
        return n * 10

    async with app.test() as t:
        assert await t.request("jobs", 4, reply_type=int) == 40
    assert attempts == [1, 2, 3]
    assert broker.late_replies == 0  # the retries answered nothing


async def test_a_failure_retried_then_answered_answers_the_value(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("jobs"), max_attempts=3, retry_delay=2)
    async def job(n: int, ctx: Context) -> int:
        if ctx.attempt == 1:
            raise ConnectionError("flaky")
        return n + ctx.attempt

    async with app.test() as t:
        assert await t.request("jobs", 1, reply_type=int) == 3


async def test_a_batch_handlers_requests_are_answered_null_on_ack(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    batches: list[list[int]] = []

    @broker.subscriber(MemoryStream("jobs"), batch=3, max_wait=1, max_attempts=1)
    async def jobs(numbers: list[int]) -> list[Any]:
        batches.append(numbers)
        return [drop() if n == 2 else ack() for n in numbers]

    async with app.test() as t:
        results: dict[int, Any] = {}

        async def ask(n: int) -> None:
            try:
                results[n] = (await broker.request(n, "jobs", timeout=5)).json()
            except RemoteError as exc:
                results[n] = exc.reason

        async with trio.open_nursery() as nursery:
            for n in (1, 2, 3):
                nursery.start_soon(ask, n)
        await t.settled()
    assert sorted(n for batch in batches for n in batch) == [1, 2, 3]
    assert results == {1: None, 2: "dropped", 3: None}


async def test_an_ordered_lane_handler_answers_its_value() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"), workers=3, by_key=lambda q: q.sku)
    async def price(quote: Quote, ctx: Context) -> Price:
        if ctx.attempt == 1 and quote.qty == 2:
            raise ConnectionError("flaky")  # retried in place, in its lane
        return Price(quote.sku, quote.qty * 2.5)

    async with app.test() as t:
        replies: dict[tuple[str, int], Price] = {}

        async def ask(quote: Quote) -> None:
            replies[quote.sku, quote.qty] = await broker.request(quote, "quotes", reply_type=Price)

        async with trio.open_nursery() as nursery:
            for quote in (Quote("tea", 1), Quote("tea", 2), Quote("rye", 2), Quote("oat", 3)):
                nursery.start_soon(ask, quote)
        await t.settled()
    assert replies == {
        ("tea", 1): Price("tea", 2.5),
        ("tea", 2): Price("tea", 5.0),
        ("rye", 2): Price("rye", 5.0),
        ("oat", 3): Price("oat", 7.5),
    }


async def test_the_reply_goes_to_the_reply_to_as_well_as_to_publisher_destinations() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"))
    @broker.publisher("prices")
    @broker.publisher("audit")
    async def price(quote: Quote) -> Price:
        return Price(quote.sku, quote.qty * 2.5)

    async with app.test() as t:
        reply = await t.request("quotes", Quote("tea", 2))
        assert [m.payload for m in t.published("prices")] == [reply.payload]
        assert [m.payload for m in t.published("audit")] == [reply.payload]
        # The publishers' copies are plain messages: they carry no reply address.
        assert REPLY_TO_HEADER not in t.published("prices")[0].headers


async def test_header_and_context_parameters_see_the_request_headers() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    seen: list[Any] = []

    @broker.subscriber(MemoryStream("quotes"))
    async def price(
        quote: Quote, tenant: Annotated[str, Header("x-tenant")], headers: Headers, ctx: Context
    ) -> str:
        seen.append((tenant, dict(headers), dict(ctx.headers)))
        # The request's own headers are the machinery's, as a retry copy's are: a handler that
        # forwards its headers must not forward "answer this request".
        seen.append(ctx.message.headers[CORRELATION_HEADER])
        return tenant

    async with app.test() as t:
        reply = await t.request("quotes", Quote("tea", 1), headers={"x-tenant": "acme"})
        assert reply.text() == "acme"
    assert seen == [("acme", {"x-tenant": "acme"}, {"x-tenant": "acme"}), reply.correlation_id]


async def test_request_headers_may_not_set_the_reply_headers() -> None:
    app = pricing_app(MemoryBroker(), MemoryStream("quotes"))
    async with app.test() as t:
        for reserved in (CORRELATION_HEADER, REPLY_TO_HEADER):
            with pytest.raises(ConfigurationError, match=reserved):
                await t.request("quotes", Quote("tea", 1), headers={reserved: "mine"})
        with pytest.raises(ConfigurationError, match="timeout"):
            await t.request("quotes", Quote("tea", 1), timeout=0)
        assert t.published("quotes") == []


async def test_a_request_that_cannot_be_decoded_answers_remote_error_undecodable() -> None:
    app = pricing_app(MemoryBroker(), MemoryStream("quotes"))
    async with app.test() as t:
        with pytest.raises(RemoteError) as failed:
            await t.request("quotes", b"not json")
        assert (failed.value.reason, failed.value.type) == ("undecodable", "DecodeError")
        assert t.handler("pricing_app.<locals>.price").call_count == 0


async def test_a_request_by_key_raises_on_answers_remote_error_by_key() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("quotes"), workers=2, by_key=lambda q: 10 // q.qty)
    async def price(quote: Quote) -> Price:
        return Price(quote.sku, quote.qty * 2.5)

    async with app.test() as t:
        with pytest.raises(RemoteError) as failed:
            await t.request("quotes", Quote("tea", 0))
        assert (failed.value.reason, failed.value.type) == ("by-key", "ZeroDivisionError")
        assert await t.request("quotes", Quote("tea", 1), reply_type=Price) == Price("tea", 2.5)


async def test_a_value_that_cannot_be_encoded_answers_remote_error_unencodable() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    calls = 0

    @broker.subscriber(MemoryStream("jobs"))
    async def job(n: int) -> object:
        nonlocal calls
        calls += 1
        return object()

    async with app.test() as t:
        with pytest.raises(RemoteError) as failed:
            await t.request("jobs", 1)
        assert (failed.value.reason, failed.value.type) == ("unencodable", "EncodeError")
    assert calls == 1  # not run again


async def test_a_dead_lettered_request_is_answered_once_and_its_letter_is_no_request() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    letters: list[int] = []

    @broker.subscriber(MemoryStream("jobs"), max_attempts=1, dead_letter="jobs.dead")
    async def job(n: int) -> int:
        raise ValueError(f"bad {n}")

    @broker.subscriber(MemoryStream("jobs.dead"))
    async def dead(n: int) -> int:
        letters.append(n)
        return n  # would answer the request again, were the letter still one

    async with app.test() as t:
        with pytest.raises(RemoteError, match="bad 7"):
            await t.request("jobs", 7)
        [letter] = t.published("jobs.dead")
        assert REPLY_TO_HEADER not in letter.headers
    assert letters == [7]
    assert broker.late_replies == 0


async def test_a_handler_forwarding_its_headers_does_not_make_the_next_stage_answer() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    forwarded = trio.Event()

    @broker.subscriber(MemoryStream("orders"))
    async def order(n: int, ctx: Context) -> str:
        await ctx.publish("billing", n, headers=ctx.headers)
        await forwarded.wait()  # the next stage has finished before this one answers
        return "accepted"

    @broker.subscriber(MemoryStream("billing"))
    async def billing(n: int) -> str:
        forwarded.set()
        return "billed"

    async with app.test() as t:
        assert await t.request("orders", 1, reply_type=str) == "accepted"
        assert t.handler(billing).call_count == 1
    assert broker.late_replies == 0


# ---- 3. late replies and cancellation -----------------------------------------------------------


def slow_app(delays: dict[int, float]) -> tuple[App, MemoryBroker]:
    """An app whose handler answers ``n`` after ``delays[n]`` seconds (0 if not given)."""
    app = App("slow")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("jobs"), workers=4)
    async def job(n: int) -> int:
        await trio.sleep(delays.get(n, 0))
        return n

    return app, broker


async def test_a_late_reply_is_dropped_and_counted(autojump_clock: trio.abc.Clock) -> None:
    app, broker = slow_app({1: 20})
    async with app.test() as t:
        with pytest.raises(RequestTimeout):
            await t.request("jobs", 1, timeout=5)
        assert broker.late_replies == 0
        await t.wait(20)  # the handler answers now, 15 s after the caller gave up
        assert broker.late_replies == 1
        assert broker.requests_in_flight == 0


async def test_a_timed_out_requests_late_reply_is_never_delivered_to_a_later_request(
    autojump_clock: trio.abc.Clock,
) -> None:
    app, broker = slow_app({1: 20, 2: 30})
    async with app.test() as t:
        with pytest.raises(RequestTimeout):
            await t.request("jobs", 1, timeout=5)
        # Asked while the first one's reply is still coming, and answered after it.
        assert await t.request("jobs", 2, timeout=60, reply_type=int) == 2
        assert broker.late_replies == 1
        assert await t.request("jobs", 3, reply_type=int) == 3
        assert broker.late_replies == 1


async def test_cancelling_the_caller_leaves_no_request_in_flight(
    autojump_clock: trio.abc.Clock,
) -> None:
    app, broker = slow_app({1: 20, 2: 20})
    async with app.test() as t:
        async with trio.open_nursery() as nursery:
            for n in (1, 2):
                nursery.start_soon(broker.request, n, "jobs")
            await trio.testing.wait_all_tasks_blocked()  # both published and waiting
            assert broker.requests_in_flight == 2
            nursery.cancel_scope.cancel()
        assert broker.requests_in_flight == 0
        await t.wait(20)
        assert broker.late_replies == 2  # answered after all, to nobody
        assert await t.request("jobs", 3, reply_type=int) == 3


async def test_a_caller_cancelled_while_the_inbox_opens_leaves_it_usable() -> None:
    app, broker = slow_app({})
    async with app.test() as t:
        with trio.CancelScope() as scope:
            scope.cancel()
            await broker.request(1, "jobs")
        assert scope.cancelled_caught
        assert broker.requests_in_flight == 0
        assert await t.request("jobs", 2, reply_type=int) == 2


# ---- 6. shutdown: the caller's broker closing, the responder draining ---------------------------


async def test_the_callers_broker_closing_fails_waiting_requests_with_reply_lost_at_once() -> None:
    errors: list[BaseException] = []

    async def ask(broker: MemoryBroker) -> None:
        try:
            await broker.request(1, "nobody", timeout=600)
        except ReplyLost as exc:
            errors.append(exc)

    with trio.fail_after(10):  # not the request's 600 s
        async with trio.open_nursery() as nursery, MemoryBroker() as broker:
            for _ in range(3):
                nursery.start_soon(ask, broker)
            await trio.testing.wait_all_tasks_blocked()
            assert broker.requests_in_flight == 3
            # The broker has closed; its requests have failed, not waited for their timeout.
    assert len(errors) == 3
    assert all("reply subscription ended" in str(e) for e in errors)
    assert broker.requests_in_flight == 0


async def test_the_responder_shutting_down_answers_or_fails_every_request_in_flight(
    autojump_clock: trio.abc.Clock,
) -> None:
    """Requests in the handler finish in the drain and are answered; those the drain gives up
    on, and those still unread, fail when the broker closes: each gets a reply or a typed
    error, none waits out its timeout."""
    app = App("slow", shutdown_timeout=5)
    broker = app.broker(MemoryBroker())
    started = 0
    all_started = trio.Event()

    @broker.subscriber(MemoryStream("jobs"), workers=4)
    async def job(n: int) -> int:
        nonlocal started
        started += 1
        if started == 4:
            all_started.set()
        await trio.sleep(n)  # 1 and 2 end within the drain, 10 and 20 do not
        return n

    outcomes: dict[int, Any] = {}
    timeout = 100

    async def ask(n: int) -> None:
        begun = trio.current_time()
        try:
            outcomes[n] = await broker.request(n, "jobs", timeout=timeout, reply_type=int)
        except (ReplyLost, RequestTimeout) as exc:
            outcomes[n] = type(exc)
        assert trio.current_time() - begun < timeout

    async with trio.open_nursery() as callers, serving(app):
        for n in (1, 2, 10, 20, 30, 40):  # 30 and 40 wait behind the four workers
            callers.start_soon(ask, n)
            await trio.testing.wait_all_tasks_blocked()  # published, in this order
        await all_started.wait()
    assert outcomes == {
        1: 1,
        2: 2,
        10: ReplyLost,
        20: ReplyLost,
        30: ReplyLost,
        40: ReplyLost,
    }
    assert broker.requests_in_flight == 0


# ---- 7. many requests in flight -----------------------------------------------------------------


async def test_ten_thousand_requests_in_flight_from_one_task_group_each_get_their_own_reply() -> (
    None
):
    count = 10_000
    app = App("echo")
    broker = app.broker(MemoryBroker())
    release = trio.Event()

    @broker.subscriber(MemoryStream("echo"), workers=16)
    async def echo(n: int) -> int:
        await release.wait()
        return n * 3

    wrong: list[tuple[int, int]] = []

    async def ask(n: int) -> None:
        got = await broker.request(n, "echo", timeout=120, reply_type=int)
        if got != n * 3:
            wrong.append((n, got))

    with trio.fail_after(120):
        async with serving(app):
            async with trio.open_nursery() as nursery:
                for n in range(count):
                    nursery.start_soon(ask, n)
                await trio.testing.wait_all_tasks_blocked()
                assert broker.requests_in_flight == count
                release.set()
            assert broker.requests_in_flight == 0
            assert broker.late_replies == 0
    assert wrong == []
