"""Mistakes refused where they are made: a dead letter its own subscription reads, a start
position under the wrong parameter name, an app name that cannot work."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_streams import (
    App,
    ConfigurationError,
    MemoryBroker,
    MemoryStream,
    Router,
)
from trio_streams.core.broker import Broker
from trio_streams.core.transport import Source
from trio_streams.file import FileBroker, FileStream
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream

#: Never connected: every check here is made at mount, before anything connects.
URL = "redis://127.0.0.1:1"


def brokers(tmp_path: Path) -> dict[str, Broker]:
    return {
        "in-process": MemoryBroker(),
        "stream file": FileBroker(tmp_path / "orders.ss"),
        "redis": RedisBroker(URL),
    }


LOOPS: list[tuple[str, Source, str]] = [
    ("in-process", MemoryStream("orders"), "orders"),
    ("in-process", MemoryStream("a", "orders"), "orders"),
    ("in-process", MemoryStream("orders", group="g"), "orders"),
    ("in-process", MemoryStream("orders").replay(), "orders"),
    ("stream file", FileStream("orders"), "orders"),
    ("stream file", FileStream("orders").replay(), "orders"),
    ("stream file", FileStream("orders", durable="billing"), "orders"),
    ("redis", RedisStream("loop"), "loop"),
    ("redis", RedisStream("loop").tail(), "loop"),
    ("redis", RedisList("jobs"), "jobs"),
    ("redis", RedisList("jobs", reliable=True), "jobs"),
    ("redis", RedisChannel("news"), "news"),
    ("redis", RedisChannel("news", sharded=True), "news"),
    ("redis", RedisChannel("news.*", pattern=True), "news.dead"),
    ("redis", RedisChannel("a", "news.[a-z]*", pattern=True), "news.dead"),
]


@pytest.mark.parametrize(("kind", "source", "dead_letter"), LOOPS, ids=repr)
def test_a_dead_letter_the_subscription_itself_reads_is_refused_at_mount(
    tmp_path: Path, kind: str, source: Source, dead_letter: str
) -> None:
    broker = brokers(tmp_path)[kind]
    with pytest.raises(ConfigurationError) as caught:

        @broker.subscriber(source, dead_letter=dead_letter)
        async def h(o: dict[str, Any]) -> None:
            raise ValueError("bad")

    message = str(caught.value)
    assert f"dead_letter {dead_letter!r} is read by its own subscription" in message
    assert message.startswith("handler ") and "\n" not in message
    assert broker.subscriptions == []


def test_a_dead_letter_loop_through_a_router_prefix_is_refused_when_the_router_is_included(
    tmp_path: Path,
) -> None:
    router = Router(prefix="billing.")

    @router.subscriber(FileStream("orders"), dead_letter="billing.orders")
    async def h(n: int) -> None: ...

    broker = FileBroker(tmp_path / "orders.ss")
    with pytest.raises(ConfigurationError, match=r"'billing\.orders' is read by its own"):
        broker.include_router(router)


NOT_LOOPS: list[tuple[str, Source, str]] = [
    ("in-process", MemoryStream("orders"), "orders.dead"),
    ("stream file", FileStream("orders"), "orders.dead"),
    ("redis", RedisStream("loop"), "loop:dead"),
    # A dead letter of another kind than the source is another thing on the server.
    ("redis", RedisList("jobs", dead_letter_kind="stream"), "jobs.dead"),
    ("redis", RedisChannel("news", dead_letter_kind="stream"), "news"),
    ("redis", RedisChannel("news.*", pattern=True, dead_letter_kind="stream"), "news.dead"),
    ("redis", RedisChannel("news.?", pattern=True), "news.dead"),
    ("redis", RedisChannel("news"), "news.dead"),
]


@pytest.mark.parametrize(("kind", "source", "dead_letter"), NOT_LOOPS, ids=repr)
def test_a_dead_letter_the_subscription_does_not_read_is_accepted(
    tmp_path: Path, kind: str, source: Source, dead_letter: str
) -> None:
    broker = brokers(tmp_path)[kind]

    @broker.subscriber(source, dead_letter=dead_letter)
    async def h(o: dict[str, Any]) -> None: ...

    assert [s.options.policy.dead_letter for s in broker.subscriptions] == [dead_letter]


def test_a_two_step_cycle_through_another_subscription_is_accepted(tmp_path: Path) -> None:
    # The other handler may well handle a dead letter (that is what a dead-letter reader is
    # for): only a subscription that reads its own dead letters certainly loops.
    broker = FileBroker(tmp_path / "orders.ss")

    @broker.subscriber(FileStream("orders"), dead_letter="orders.dead")
    async def orders(n: int) -> None: ...

    @broker.subscriber(FileStream("orders.dead"), dead_letter="orders")
    async def dead(n: int) -> None: ...

    assert len(broker.subscriptions) == 2


async def test_the_in_process_forms_refuse_the_same_loops() -> None:
    from trio_streams.memory.channels import MemoryChannel
    from trio_streams.memory.queues import MemoryList

    assert MemoryList("jobs").reads_dead_letter("jobs")
    assert not MemoryList("jobs", dead_letter_to_list=False).reads_dead_letter("jobs")
    assert MemoryChannel(("n.*",), pattern=True).reads_dead_letter("n.x")
    assert not MemoryChannel(
        ("n.*",), pattern=True, dead_letter_to_channel=False
    ).reads_dead_letter("n.x")


# ---- the parameter the user wrote -------------------------------------------------------------


@pytest.mark.parametrize(
    ("make", "parameter"),
    [
        (lambda: RedisStream("s", start="0"), "start"),  # type: ignore[arg-type]
        (lambda: FileStream("s", start_at="0"), "start_at"),  # type: ignore[arg-type]
        (lambda: MemoryStream("s", start_at="0"), "start_at"),  # type: ignore[arg-type]
    ],
    ids=["RedisStream", "FileStream", "MemoryStream"],
)
def test_an_error_names_the_parameter_the_user_wrote(make: Any, parameter: str) -> None:
    with pytest.raises(ConfigurationError) as caught:
        make()
    message = str(caught.value)
    assert f"{parameter} takes a Position, not '0'" in message, message
    if parameter == "start":
        assert "start_at" not in message, message


@pytest.mark.parametrize("minid", ["abc", "1-x", 5])
def test_a_bad_trim_bound_is_refused_naming_minid_and_the_value_as_written(minid: object) -> None:
    with pytest.raises(ConfigurationError) as caught:
        RedisBroker(URL, minid=minid)  # type: ignore[arg-type]
    assert str(caught.value) == f"minid takes an entry id, <ms> or <ms>-<seq>, not {minid!r}"


@pytest.mark.parametrize("minid", ["10", "10-0", "1700000000000-3"])
def test_a_trim_bound_in_milliseconds_or_an_entry_id_is_accepted(minid: str) -> None:
    RedisBroker(URL, minid=minid)


# ---- the app's name ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["", " ", "\t\n"])
def test_an_empty_or_whitespace_app_name_is_refused(name: str) -> None:
    with pytest.raises(ConfigurationError, match="App\\(\\) needs a name"):
        App(name)


@pytest.mark.parametrize("name", ["a/b", "shop:eu", "shop#2", "shop@host", "my shop", "x\x00"])
def test_an_app_name_that_cannot_work_in_retry_targets_or_consumer_names_is_refused(
    name: str,
) -> None:
    with pytest.raises(ConfigurationError, match="an app's name cannot hold") as caught:
        App(name)
    assert "\n" not in str(caught.value)


def test_an_app_name_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="takes a name"):
        App(None)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["shop", "billing-canary", "orders.v2", "Shop_EU", "café"])
def test_ordinary_app_names_are_accepted(name: str) -> None:
    assert App(name).name == name


# ---- an app with nothing to do -----------------------------------------------------------------


def nothing_to_do(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "nothing to do" in r.getMessage()]


async def test_an_app_that_starts_with_nothing_registered_logs_a_warning(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    app = App("idle")
    unregistered = FileBroker(tmp_path / "x.ss")

    @unregistered.subscriber(FileStream("orders"))
    async def h(n: int) -> None: ...

    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with app.test():
            pass
    (line,) = nothing_to_do(caplog)
    assert line.startswith("idle: no broker, no subscription, no task, no hook"), line
    assert "app.broker(...)" in line, line


async def test_an_app_that_only_publishes_through_its_broker_does_not_warn(
    caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    desk = App("orders-desk")
    log = desk.broker(FileBroker(tmp_path / "shop.ss"))
    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(desk.serve)
            await running.publish(log, "orders", 1)
            await running.aclose()
    assert nothing_to_do(caplog) == []


async def test_an_app_with_only_a_startup_hook_does_not_warn(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = App("hooked")
    ran: list[str] = []

    @app.after_startup
    async def started() -> None:
        ran.append("started")

    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with app.test():
            pass
    assert ran == ["started"]
    assert nothing_to_do(caplog) == []


async def test_an_app_with_only_a_lifespan_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        yield

    app = App("spanned", lifespan=lifespan)
    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with app.test():
            pass
    assert nothing_to_do(caplog) == []


async def test_an_app_with_only_a_task_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    app = App("ticker")

    @app.task
    async def tick() -> None: ...

    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with app.test():
            pass
    assert nothing_to_do(caplog) == []


async def test_an_app_with_a_subscription_does_not_warn(caplog: pytest.LogCaptureFixture) -> None:
    app = App("shop")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"))
    async def h(n: int) -> None: ...

    with caplog.at_level(logging.WARNING, logger="trio_streams"):
        async with app.test():
            pass
    assert nothing_to_do(caplog) == []
