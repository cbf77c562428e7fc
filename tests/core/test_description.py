"""Transports describe themselves: the AsyncAPI document and the middlewares' kind come from
what a broker and its sources say, not from their class names."""

from __future__ import annotations

from typing import Any

from trio_streams import App, MemoryBroker, MemoryStream
from trio_streams.core.description import Binding, BrokerDescription, SourceDescription
from trio_streams.core.middleware import broker_kind
from trio_streams.file import FileBroker, FileStream
from trio_streams.integrations.asyncapi import asyncapi_document
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream


class Tubes(MemoryBroker):
    """A broker of another kind, which says what it is."""

    kind = "tubes"

    def description(self) -> BrokerDescription:
        return BrokerDescription(
            kind=self.kind,
            system="tubes",
            server={"host": "tubes.example", "protocol": "tubes", "description": "tubes"},
        )


class Tube(MemoryStream):
    def description(self) -> SourceDescription:
        return SourceDescription(system="tubes", reads=Binding("tubes", {"method": "suck"}))


def test_the_shipped_brokers_say_their_kind_and_system() -> None:
    described = [
        (b.description().kind, b.description().system)
        for b in (RedisBroker(), FileBroker("x.ss"), MemoryBroker())
    ]
    assert described == [
        ("redis", "redis"),
        ("file", "trio_streams.file"),
        ("memory", "trio_streams.memory"),
    ]
    assert [broker_kind(b) for b in (RedisBroker(), FileBroker("x.ss"), MemoryBroker())] == [
        "redis",
        "file",
        "memory",
    ]


def test_the_redis_sources_say_how_they_are_read_and_dead_lettered() -> None:
    def methods(source: Any) -> tuple[Any, Any]:
        described = source.description()
        return described.reads.fields["method"], described.dead_letters.fields["method"]

    assert methods(RedisStream("s")) == ("xreadgroup", "xadd")
    assert methods(RedisStream("s").replay()) == ("xread", "xadd")
    assert methods(RedisList("l", reliable=True, pop="right")) == ("blmove", "lpush")
    assert methods(RedisList("l", dead_letter_kind="stream")) == ("blpop", "xadd")
    assert methods(RedisChannel("c", sharded=True)) == ("ssubscribe", "spublish")
    assert methods(RedisChannel("c.*", pattern=True, dead_letter_kind="stream")) == (
        "psubscribe",
        "xadd",
    )
    assert FileStream("f").description().reads is None
    assert MemoryStream("m", group="g").description().group == "g"


def test_a_broker_of_another_kind_is_documented_as_it_says() -> None:
    app = App("tubes")
    broker = app.broker(Tubes(name="tubes"))

    @broker.subscriber(Tube("pipe"))
    async def handle(body: bytes) -> None: ...

    document = asyncapi_document(app)
    assert document["servers"]["tubes"]["host"] == "tubes.example"
    (channel,) = document["channels"].values()
    assert channel["bindings"] == {"tubes": {"method": "suck", "bindingVersion": "custom"}}
    assert broker_kind(broker) == "tubes"
