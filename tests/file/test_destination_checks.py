"""Every destination is checked by the real broker where it is declared — publishers, dead
letters — and at every publish, under ``app.test()`` too: a test that passes in-process must
not hide a destination the stream file would refuse on the first failed message."""

from __future__ import annotations

from pathlib import Path

import pytest

from trio_streams import App, ConfigurationError, Router
from trio_streams.file import FileBroker, FileStream


def file_app(tmp_path: Path) -> tuple[App, FileBroker]:
    app = App("svc")
    return app, app.broker(FileBroker(tmp_path / "orders.ss"))


def test_a_dead_letter_the_file_cannot_hold_is_refused_at_mount(tmp_path: Path) -> None:
    _app, broker = file_app(tmp_path)
    with pytest.raises(ConfigurationError, match=r"dead_letter: .*'orders/dead' is not valid"):

        @broker.subscriber(FileStream("orders"), dead_letter="orders/dead")
        async def handle(n: int) -> None: ...


def test_a_publisher_to_a_key_the_file_cannot_hold_is_refused_at_declaration(
    tmp_path: Path,
) -> None:
    _app, broker = file_app(tmp_path)
    with pytest.raises(ConfigurationError, match="'shipped orders' is not valid"):
        broker.publisher("shipped orders")


def test_a_routers_publisher_is_checked_when_the_router_is_included(tmp_path: Path) -> None:
    _app, broker = file_app(tmp_path)
    router = Router()

    @router.subscriber(FileStream("orders"), dead_letter="dead:letters")
    async def handle(n: int) -> None: ...

    with pytest.raises(ConfigurationError, match="'dead:letters' is not valid"):
        broker.include_router(router)


async def test_publishing_to_a_key_the_file_cannot_hold_fails_under_app_test_too(
    tmp_path: Path,
) -> None:
    app, broker = file_app(tmp_path)

    @broker.subscriber(FileStream("orders"))
    async def handle(n: int) -> None: ...

    async with app.test() as t:
        with pytest.raises(ConfigurationError, match="'orders/v2' is not valid"):
            await t.publish("orders/v2", 1)
        with pytest.raises(ConfigurationError, match="is reserved"):
            await broker.publish("SEA_STREAMER_INTERNAL", 1)
    assert not (tmp_path / "orders.ss").exists()  # app.test() never touched the file


def test_a_valid_dead_letter_and_publisher_are_accepted(tmp_path: Path) -> None:
    _app, broker = file_app(tmp_path)
    out = broker.publisher("orders.shipped")

    @out
    @broker.subscriber(FileStream("orders"), dead_letter="orders.dead")
    async def handle(n: int) -> int:
        return n

    assert len(broker.subscriptions) == 1


async def test_under_app_test_a_file_subscriptions_count_sizes_its_channel(
    tmp_path: Path,
) -> None:
    app, broker = file_app(tmp_path)

    @broker.subscriber(FileStream("orders"), count=500)
    async def handle(n: int) -> None: ...

    async with app.test() as t:
        [stats] = t.running.stats().values()
    assert stats.capacity == 500  # as in production: one read fits in the channel
