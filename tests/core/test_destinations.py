"""Destinations that fit Redis: "publish destinations must be able to say stream, list or channel."

A plain ``str`` is a stream; ``Destination.list`` and ``Destination.channel`` name the other
kinds; a broker refuses a kind its transport does not have, at declaration when it can.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from tests.support import serving
from trio_streams import (
    App,
    ConfigurationError,
    Destination,
    MemoryBroker,
    MemoryStream,
    Router,
    UnsupportedError,
)
from trio_streams.core.destinations import DestinationKind
from trio_streams.file import FileBroker
from trio_streams.memory.broker import MemoryTransport


def test_a_plain_name_is_a_stream_and_the_other_kinds_say_so() -> None:
    assert Destination.of("orders") == Destination.stream("orders")
    assert Destination.of("orders").kind is DestinationKind.STREAM
    assert Destination.list("jobs").kind is DestinationKind.LIST
    assert Destination.channel("news").kind is DestinationKind.CHANNEL
    assert str(Destination.list("jobs")) == "list jobs" and str(Destination.of("s")) == "s"
    assert Destination.list("jobs").with_prefix("app.") == Destination.list("app.jobs")
    with pytest.raises(ConfigurationError, match="non-empty str"):
        Destination("")
    with pytest.raises(ConfigurationError, match="DestinationKind"):
        Destination("x", "list")  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", [Destination.list, Destination.channel])
async def test_stream_only_brokers_refuse_lists_and_channels_at_publish(
    tmp_path: Path, kind: Any
) -> None:
    app = App("svc")
    memory = app.broker(MemoryBroker())
    file = app.broker(FileBroker(tmp_path / "s.ss"))
    async with serving(app):
        for broker in (memory, file):
            with pytest.raises(UnsupportedError, match=r"cannot publish to .* it has: stream"):
                await broker.publish(kind("jobs"), {"id": 1})
            await broker.publish(Destination.stream("orders"), {"id": 1})  # streams are fine


def test_a_publisher_to_a_kind_the_broker_lacks_is_refused_at_declaration() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    with pytest.raises(UnsupportedError, match="list 'jobs'"):
        broker.publisher(Destination.list("jobs"))


def test_a_router_publisher_is_checked_with_its_prefix_when_the_router_is_included() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    router = Router(prefix="app.")
    router.publisher(Destination.channel("news"))
    with pytest.raises(UnsupportedError, match=r"channel 'app\.news'"):
        broker.include_router(router)


async def test_a_transport_with_lists_and_channels_gets_them_through_publish_to() -> None:
    published: list[tuple[Destination, bytes]] = []

    class Queues(MemoryTransport):
        async def publish_to(
            self, destination: Destination, payload: bytes, headers: Mapping[str, str]
        ) -> Any:
            published.append((destination, payload))
            return "queued"

    class QueueBroker(MemoryBroker):
        destination_kinds: ClassVar[frozenset[DestinationKind]] = frozenset(DestinationKind)

        @asynccontextmanager
        async def connect(self) -> AsyncIterator[MemoryTransport]:
            yield Queues(self.hub)

    app = App("svc")
    broker = app.broker(QueueBroker())
    out = broker.publisher(Destination.list("jobs"))
    async with serving(app):
        assert await out.publish(7) == "queued"
        assert await broker.publish(Destination.channel("news"), "hi") == "queued"
        await broker.publish("orders", 1)  # a stream: the transport's publish, as before
    assert published == [(Destination.list("jobs"), b"7"), (Destination.channel("news"), b"hi")]
    assert broker.hub.log("orders").next_seq == 2


def test_a_routers_publisher_is_refused_when_mounted_on_a_broker_without_its_kind() -> None:
    router = Router()
    router.publisher(Destination.list("jobs"))
    inner = Router()
    inner.publisher(Destination.channel("news"))
    outer = Router()
    outer.include_router(inner)
    with pytest.raises(UnsupportedError, match="cannot publish to list 'jobs'"):
        MemoryBroker().include_router(router)
    with pytest.raises(UnsupportedError, match="cannot publish to channel 'news'"):
        MemoryBroker().include_router(outer)


async def test_under_app_test_a_list_is_an_in_process_work_queue_and_a_channel_is_apart() -> None:
    class QueueBroker(MemoryBroker):
        destination_kinds: ClassVar[frozenset[DestinationKind]] = frozenset(DestinationKind)

    app = App("svc")
    broker = app.broker(QueueBroker())
    jobs = broker.publisher(Destination.list("jobs"))

    @jobs
    @broker.subscriber(MemoryStream("orders"))
    async def plan(n: int) -> int:
        return n * 10

    async with app.test() as t:
        await t.publish("orders", 4)
        await broker.publish(Destination.channel("news"), "hi")
        # A list is a work queue of its own, and a channel a bus of its own, each apart from
        # any stream of the same name.
        assert [m.json() for m in t.published(Destination.list("jobs"))] == [40]
        assert t.published("jobs") == []
        assert [m.decode(str) for m in t.published(Destination.channel("news"))] == ["hi"]
        assert t.published("news", unwritten_ok=True) == []
