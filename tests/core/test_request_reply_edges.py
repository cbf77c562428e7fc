"""Request-reply at its edges: a reply that came before the deadline passed, an address the
broker cannot reach, observers that answer nothing, a reply that is not JSON."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from trio_streams import (
    App,
    ConfigurationError,
    DecodeError,
    MemoryBroker,
    MemoryStream,
    Middleware,
)
from trio_streams.core.middleware import PublishCall
from trio_streams.core.replies import CORRELATION_HEADER, REPLY_TO_HEADER
from trio_streams.file import FileBroker, FileStream
from trio_streams.integrations.asyncapi import asyncapi_document


class SlowAfterPublish(Middleware):
    """Holds each publish 0.2 s after it went out (on Trio's clock)."""

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        yield
        if REPLY_TO_HEADER in call.headers:
            await trio.sleep(0.2)


async def test_a_reply_that_came_before_the_deadline_passed_is_returned(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc", middlewares=[SlowAfterPublish()])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("q"))
    async def double(n: int) -> int:
        return n * 2

    async with app.test() as t:
        # The reply is in before the publish returns; the deadline passes after it.
        assert await t.request("q", 21, timeout=0.1, reply_type=int) == 42
        assert broker.late_replies == 0


async def test_a_reply_to_an_address_the_broker_cannot_reach_does_not_run_the_handler_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    app = App("svc")
    broker = app.broker(FileBroker(tmp_path / "recorded.ss"))
    runs: list[int] = []

    @broker.subscriber(FileStream("orders"))
    async def charge(n: int) -> int:
        runs.append(n)
        return n

    # A recording of Redis requests, replayed into a stream file: their reply-to is a channel.
    headers = {CORRELATION_HEADER: "c1", REPLY_TO_HEADER: "trio-streams:reply:host-1-x:ab12"}
    with caplog.at_level(logging.WARNING):
        async with app.test() as t:
            await t.publish("orders", 7, headers=headers)
    assert runs == [7]  # once: the outcome went on, as the handler's
    assert "is not answered: its reply-to 'trio-streams:reply:host-1-x:ab12'" in caplog.text


async def test_a_no_reply_observer_never_races_the_service_that_answers() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    audited: list[int] = []

    @broker.subscriber(MemoryStream("orders"))
    async def charge(n: int) -> int:
        return n * 100

    @broker.subscriber(MemoryStream("orders"), no_reply=True)
    async def audit(n: int) -> None:
        audited.append(n)

    async with app.test() as t:
        answers = [await t.request("orders", n, reply_type=int) for n in range(8)]
        assert answers == [n * 100 for n in range(8)]
        assert broker.late_replies == 0  # the observer answered nothing, not even null
    assert audited == list(range(8))


async def test_a_no_reply_subscription_alone_leaves_the_request_to_time_out(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), no_reply=True)
    async def audit(n: int) -> int:
        return n

    async with app.test() as t:
        with pytest.raises(trio.TooSlowError):
            await t.request("orders", 1, timeout=1)


def test_no_reply_is_true_or_false() -> None:
    broker = MemoryBroker()
    with pytest.raises(ConfigurationError, match="no_reply is True or False"):

        @broker.subscriber(MemoryStream("orders"), no_reply="yes")  # type: ignore[arg-type]
        async def audit(n: int) -> None:
            del n


def test_asyncapi_describes_no_reply_for_a_no_reply_subscription() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"))
    async def charge(n: int) -> int:
        return n

    @broker.subscriber(MemoryStream("orders"), no_reply=True)
    async def audit(n: int) -> int:
        return n

    operations = asyncapi_document(app)["operations"]
    replies = {name: "reply" in operation for name, operation in operations.items()}
    assert [v for k, v in replies.items() if "charge" in k] == [True]
    assert [v for k, v in replies.items() if "audit" in k] == [False]


async def test_a_reply_that_is_not_json_is_a_decode_error_from_json() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("q"))
    async def greet(name: str) -> str:
        return f"hello {name}"

    async with app.test() as t:
        reply = await t.request("q", "ann")
        assert reply.text() == "hello ann"
        with pytest.raises(DecodeError, match="the reply is not JSON"):
            reply.json()


async def test_raise_errors_leaves_a_requests_own_failed_attempt_to_its_reply() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    tries: list[int] = []

    @broker.subscriber(MemoryStream("q"), max_attempts=2)
    async def flaky(n: int) -> int:
        tries.append(n)
        if len(tries) == 1:
            raise RuntimeError("first time fails")
        return n

    async with app.test(raise_errors=True) as t:
        assert await t.request("q", 7, reply_type=int) == 7  # the message's final outcome
    assert tries == [7, 7]


async def test_an_in_process_request_nothing_reads_times_out_saying_so(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with MemoryBroker() as broker:
        with pytest.raises(trio.TooSlowError, match="no subscription reads stream 'nobody'"):
            await broker.request(1, "nobody", timeout=1)

    app = App("svc")
    redis_like = app.broker(MemoryBroker())

    @redis_like.subscriber(MemoryStream("orders"))
    async def charge(n: int) -> int:
        return n

    async with app.test() as t:
        with pytest.raises(trio.TooSlowError, match="no subscription reads stream 'nobody'"):
            await t.request("nobody", 1, timeout=1, unread_ok=True)
        assert await t.request("orders", 2, reply_type=int) == 2  # read: served
