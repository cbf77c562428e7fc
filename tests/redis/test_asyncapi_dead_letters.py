"""The AsyncAPI document says where a Redis subscription's dead letters go and what they carry:
a real server finds each letter in the key, of the type and at the end, that its channel's
binding names, with the documented headers and the payload as its content type says."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Destination, Position
from trio_streams.core.codec import encode
from trio_streams.core.transport import Source
from trio_streams.integrations.asyncapi import asyncapi_document
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream
from trio_streams.redis.client import Message, RedisClient
from trio_streams.redis.frames import decode_frame, encode_frame
from trio_streams.redis.wire import decode_fields, encode_fields

TEXT = "5.50 €"

SOURCES: dict[str, Source] = {
    "group": RedisStream("orders", group="g", start=Position.beginning()),
    "simple list": RedisList("orders"),
    "list taken from the right": RedisList("orders", pop="right"),
    "reliable list": RedisList("orders", reliable=True),
    "list to a stream": RedisList("orders", dead_letter_kind="stream"),
}


def _app(url: str, source: Source) -> App:
    app = App("svc")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(source, name="orders", max_attempts=1, dead_letter="orders.dead")
    async def handle(text: str) -> None:
        raise ValueError(f"refused {text}")

    return app


def _dead_letter_of(document: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The dead-letter channel's Redis method, and its message."""
    channel = document["channels"]["redis.orders.dead"]
    (ref,) = channel["messages"].values()
    message = document["components"]["messages"][ref["$ref"].rsplit("/", 1)[1]]
    method: str = channel["bindings"]["redis"]["method"]
    return method, message


async def _send(redis: RedisClient, source: Source) -> None:
    """One text message onto the source, as its publishers write it."""
    if isinstance(source, RedisStream):
        await redis.execute("XADD", "orders", "*", *encode_fields(encode(TEXT), {}))
    else:
        assert isinstance(source, RedisList)
        await redis.execute(source.pop.push, "orders", encode_frame(encode(TEXT), {}))


@pytest.mark.parametrize("name", sorted(SOURCES))
async def test_a_dead_letter_lands_where_its_channel_says_carrying_the_documented_headers(
    redis_server: RedisServer, redis: RedisClient, name: str
) -> None:
    source = SOURCES[name]
    app = _app(redis_server.url, source)
    method, message = _dead_letter_of(asyncapi_document(app))
    kind = "stream" if method == "xadd" else "list"
    if kind == "list":
        await redis.execute("RPUSH", "orders.dead", "earlier")
    async with serving(app):
        await _send(redis, source)

        # The letter, and on a list the earlier entry beside it.
        wanted = 1 if kind == "stream" else 2

        async def arrived() -> bool:
            length = await redis.execute("XLEN" if kind == "stream" else "LLEN", "orders.dead")
            return bool(length == wanted)

        await eventually(arrived, within=20, what="the dead letter")
    assert (await redis.execute("TYPE", "orders.dead")) in (kind, kind.encode())
    if kind == "stream":
        [[_, fields]] = await redis.execute("XRANGE", "orders.dead", "-", "+")
        payload, headers = decode_fields(fields)
    else:
        # rpush puts the letter after the earlier entry, lpush before it.
        index = -1 if method == "rpush" else 0
        payload, headers = decode_frame(await redis.execute("LINDEX", "orders.dead", index))
    _carries_what_is_documented(message, payload, headers)


@pytest.mark.parametrize("sharded", [False, True], ids=["PUBLISH", "SPUBLISH"])
async def test_a_pubsub_dead_letter_is_published_as_its_channel_says_carrying_its_headers(
    redis_server: RedisServer, redis: RedisClient, sharded: bool
) -> None:
    app = _app(redis_server.url, RedisChannel("orders", sharded=sharded))
    method, message = _dead_letter_of(asyncapi_document(app))
    assert method == ("spublish" if sharded else "publish")
    subscribing = (
        redis.subscribe(shard_channels=["orders.dead"])
        if sharded
        else redis.subscribe(["orders.dead"])
    )
    (broker,) = app.brokers
    async with subscribing as letters, serving(app):
        await broker.publish(Destination.channel("orders", sharded=sharded), TEXT)
        with trio.fail_after(20):
            letter = await anext(letters)
    assert isinstance(letter, Message) and letter.channel == b"orders.dead"
    payload, headers = decode_frame(letter.data)
    _carries_what_is_documented(message, payload, headers)


def _carries_what_is_documented(
    message: dict[str, Any], payload: bytes, headers: dict[str, str]
) -> None:
    assert message["contentType"] == "text/plain; charset=utf-8"
    assert payload == TEXT.encode("utf-8")  # the UTF-8 text itself, not a JSON string
    documented = message["headers"]["properties"]
    assert set(message["headers"]["required"]) <= set(headers)
    assert headers["x-dead-letter-reason"] in documented["x-dead-letter-reason"]["enum"]
    assert headers["x-dead-letter-subscription"] == "orders"
