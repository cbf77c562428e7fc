"""Foreign entries with bytes that are not UTF-8, read from a real server: a handler gets
every byte (the payload is the entry's fields as JSON, ``entry_fields`` gives them back), and
a retry copy and a dead letter carry the same bytes."""

from __future__ import annotations

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Outcome, Position, ack, retry
from trio_streams.redis import RedisBroker, RedisStream, entry_fields
from trio_streams.redis.client import RedisClient

from .support import entries

HIGH = bytes(range(0x80, 0x100))

FOREIGN = {
    "high bytes in values": [b"kind", b"click", b"blob", HIGH],
    "high bytes in a name": [b"n\x80\xff", b"v"],
    "a header value that is not UTF-8": [b"_payload", b'{"n":1}', b"h:trace", b"t\xff\xfe"],
}


@pytest.mark.parametrize("fields", FOREIGN.values(), ids=FOREIGN.keys())
@pytest.mark.parametrize("group", ["g", None], ids=["group", "plain"])
async def test_a_handler_gets_every_byte_of_a_foreign_entry(
    redis_server: RedisServer, redis: RedisClient, fields: list[bytes], group: str | None
) -> None:
    await redis.execute("XADD", "in", "*", *fields)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    got: list[tuple[bytes, dict[str, str]]] = []
    done = trio.Event()
    source = RedisStream("in", group=group, start=Position.beginning())

    @broker.subscriber(source if group else source.replay())
    async def handle(body: bytes, ctx: Context) -> None:
        got.append((body, dict(ctx.headers)))
        done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
    [(body, headers)] = got
    assert headers == {}
    assert "\ufffd".encode() not in body
    assert entry_fields(body) == fields


@pytest.mark.parametrize("fields", FOREIGN.values(), ids=FOREIGN.keys())
async def test_a_retry_copy_of_a_foreign_entry_carries_the_same_bytes(
    redis_server: RedisServer, redis: RedisClient, fields: list[bytes]
) -> None:
    await redis.execute("XADD", "in", "*", *fields)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    got: list[bytes] = []
    twice = trio.Event()

    @broker.subscriber(RedisStream("in", group="g", start=Position.beginning()))
    async def handle(body: bytes) -> Outcome:
        got.append(body)
        if len(got) == 1:
            return retry()
        twice.set()
        return ack()

    async with serving(app):
        with trio.fail_after(10):
            await twice.wait()
    first, again = got
    assert again == first
    assert entry_fields(again) == fields
    [_, (_, copy)] = await redis.execute("XRANGE", "in", "-", "+")  # the original, the copy
    assert dict(zip(copy[::2], copy[1::2], strict=True))[b"_payload"] == first


@pytest.mark.parametrize("fields", FOREIGN.values(), ids=FOREIGN.keys())
async def test_a_dead_letter_of_a_foreign_entry_carries_the_same_bytes(
    redis_server: RedisServer, redis: RedisClient, fields: list[bytes]
) -> None:
    await redis.execute("XADD", "in", "*", *fields)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    got: list[bytes] = []

    @broker.subscriber(
        RedisStream("in", group="g", start=Position.beginning()),
        max_attempts=1,
        dead_letter="in.dead",
    )
    async def handle(body: bytes) -> None:
        got.append(body)
        raise ValueError("nope")

    async def dead_lettered() -> bool:
        return bool(await redis.execute("XLEN", "in.dead"))

    async with serving(app):
        await eventually(dead_lettered, within=10, what="the dead letter")
    [(_, letter)] = await entries(redis, "in.dead")
    assert letter["_payload"] == got[0]
    assert entry_fields(letter["_payload"]) == fields
    assert letter["h:x-dead-letter-reason"] == b"max-attempts"
