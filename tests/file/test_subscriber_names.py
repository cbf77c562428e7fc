"""``@file_broker.subscriber("orders")`` on a real stream file: a durable consumer of the key,
named after the app and subscription, that starts at the tip and resumes after a restart."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import trio

from tests.support import serving
from trio_streams import App, ConfigurationError
from trio_streams.file import DurableLockedError, FileBroker, FileStream
from trio_streams.file.durable import DurableStore, consumer_name_of
from trio_streams.file.reader import FileReader

from .apps import refused_at_start, write_numbers


class Seen:
    """What a handler saw, and a wait for the n-th message."""

    def __init__(self) -> None:
        self.numbers: list[int] = []
        self._changed = trio.Event()

    async def handle(self, n: int) -> None:
        self.numbers.append(n)
        self._changed.set()
        self._changed = trio.Event()

    async def until(self, count: int) -> list[int]:
        with trio.fail_after(10):
            while len(self.numbers) < count:
                await self._changed.wait()
        return self.numbers


def _name_app(path: Path, seen: Seen, *, name: str = "svc") -> tuple[App, FileBroker]:
    """An app ``name`` whose handler ``handle`` subscribes to ``orders`` by name."""
    app = App(name)
    broker = app.broker(FileBroker(path))
    broker.subscriber("orders", name="handle")(seen.handle)
    return app, broker


async def test_a_file_broker_subscriber_by_name_gets_messages_published_to_that_key(
    tmp_path: Path,
) -> None:
    seen = Seen()
    app, broker = _name_app(tmp_path / "shop.ss", seen)
    async with serving(app):
        await broker.publish("refunds", 99)  # another key: not this subscription's
        for n in (1, 2, 3):
            await broker.publish("orders", n)
        assert await seen.until(3) == [1, 2, 3]


async def test_the_first_run_starts_at_the_tip(tmp_path: Path) -> None:
    path = tmp_path / "shop.ss"
    write_numbers(path, 3, key="orders")
    seen = Seen()
    app, broker = _name_app(path, seen)
    async with serving(app):
        await broker.publish("orders", 4)
        assert await seen.until(1) == [4]


async def test_a_restarted_app_resumes_where_it_stopped_with_what_came_meanwhile(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    seen = Seen()
    app, broker = _name_app(path, seen)
    async with serving(app):
        for n in (1, 2):
            await broker.publish("orders", n)
        await seen.until(2)
    write_numbers(path, 3, key="orders", first=3)  # published while the app was down
    app, broker = _name_app(path, seen)
    async with serving(app):
        await broker.publish("orders", 6)
        assert await seen.until(6) == [1, 2, 3, 4, 5, 6]  # nothing skipped, nothing twice


async def test_its_durable_consumer_is_named_after_the_app_and_the_subscription(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "shop.ss"
    write_numbers(path, 1, key="orders")
    seen = Seen()
    app, broker = _name_app(path, seen, name="billing")
    with caplog.at_level(logging.INFO, logger="trio_streams.app.billing"):
        async with serving(app):
            await broker.publish("orders", 2)
            assert await seen.until(1) == [2]
    assert sorted(p.name for p in (tmp_path / "shop.ss.consumers").iterdir()) == [
        "billing.handle.json",
        "billing.handle.lock",
    ]
    (banner,) = [r.getMessage() for r in caplog.records if "'handle' reads" in r.getMessage()]
    assert "reads FileStream('orders', durable=True) on file" in banner
    assert (
        "resuming durable consumer 'billing.handle' where it stopped (the first time: from the "
        "tip)" in banner
    )


async def test_two_apps_of_different_names_each_get_every_message(tmp_path: Path) -> None:
    path = tmp_path / "shop.ss"
    seen = {name: Seen() for name in ("billing", "shipping")}
    (billing, broker), (shipping, _) = (_name_app(path, seen[name], name=name) for name in seen)
    async with serving(billing), serving(shipping):
        for n in (1, 2, 3):
            await broker.publish("orders", n)
        for each in seen.values():
            assert await each.until(3) == [1, 2, 3]


async def test_the_same_app_running_twice_at_once_is_refused_its_consumer_runs_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    write_numbers(path, 1, key="orders")
    first, _ = _name_app(path, Seen())
    second, _ = _name_app(path, Seen())
    async with serving(first):
        refusal = await refused_at_start(second, DurableLockedError)
    assert "durable consumer 'svc.handle' is already running" in str(refusal)


async def test_two_handlers_of_one_name_in_an_app_are_two_consumers_each_getting_every_message(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    app = App("svc")
    broker = app.broker(FileBroker(path))
    seen = [Seen(), Seen()]
    for each in seen:
        broker.subscriber("orders", name="handle")(each.handle)  # the second is handle#2
    async with serving(app):
        for n in (1, 2):
            await broker.publish("orders", n)
        for each in seen:
            assert await each.until(2) == [1, 2]
    assert {p.name for p in (tmp_path / "shop.ss.consumers").glob("*.json")} == {
        "svc.handle.json",
        "svc.handle.2.json",
    }


async def test_an_app_name_a_consumer_name_cannot_hold_is_made_one(tmp_path: Path) -> None:
    path = tmp_path / "shop.ss"
    seen = Seen()
    app, broker = _name_app(path, seen, name="café+")
    async with serving(app):
        await broker.publish("orders", 1)
        await seen.until(1)
    assert (tmp_path / "shop.ss.consumers" / "caf__.handle.json").exists()


async def test_a_start_that_fails_on_a_later_subscription_releases_the_earlier_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    write_numbers(path, 1, key="orders")
    with FileReader(path) as reader:
        created = reader.header.created_at_ms

    def two_subscriptions() -> tuple[App, FileBroker]:
        app = App("svc")
        broker = app.broker(FileBroker(path))
        broker.subscriber("orders", name="first")(Seen().handle)
        broker.subscriber("orders", name="second")(Seen().handle)
        return app, broker

    held = DurableStore(str(path), "svc.second", file_created_at_ms=created)
    try:
        app, _ = two_subscriptions()
        await refused_at_start(app, DurableLockedError)
    finally:
        held.close()
    app, broker = two_subscriptions()
    async with serving(app):  # "svc.first" was released: this start takes both
        await broker.publish("orders", 2)


@pytest.mark.parametrize(
    ("target", "name"),
    [
        ("svc/handle", "svc.handle"),
        ("svc/handle#2", "svc.handle.2"),
        ("svc/handle#2#3", "svc.handle.2.3"),
        ("café+/on order", "caf__.on_order"),
        (".hidden/h", "_hidden.h"),
    ],
)
def test_the_consumer_name_is_app_dot_subscription_as_a_name_can_hold_it(
    target: str, name: str
) -> None:
    assert consumer_name_of(target) == name


def test_a_consumer_name_too_long_for_a_file_name_is_refused_saying_what_to_do() -> None:
    with pytest.raises(ConfigurationError, match="longer than 200 characters: give the"):
        consumer_name_of("svc/" + "h" * 200)


def test_durable_true_is_named_at_start_false_is_none_and_anything_else_is_refused() -> None:
    assert FileStream("orders", durable=False) == FileStream("orders")
    assert FileStream("orders", durable=True).consumer_name == "<app>.<subscription>"
    with pytest.raises(
        ConfigurationError, match=r"durable takes a consumer name \(a str\) or True"
    ):
        FileStream("orders", durable=1)  # type: ignore[arg-type]
