"""An entry written the ordinary Redis way (``XADD orders * id 1 amount 9.5``, no ``_payload``)
whose fields do not decode to the handler's type: the log and the dead letter say the entry
has no ``_payload`` field and how to write one; an entry in the transport's layout does not
get that hint, and a header that cannot be read is named as a header."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated

import pytest

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Header, Position
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient

from .support import entries


@dataclass
class Order:
    id: int
    amount: float


async def _dead_letter_error(
    redis_server: RedisServer, redis: RedisClient, group: str | None, *, header: bool = False
) -> str:
    """Run an app whose handler takes an ``Order`` (and, with ``header``, an int header) on
    ``in`` until the entry there is dead-lettered; its ``x-dead-letter-error``."""
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    source = RedisStream("in", group=group, start=Position.beginning())

    if header:

        @broker.subscriber(source if group else source.replay(), dead_letter="in.dead")
        async def counted(order: Order, count: Annotated[int, Header("x-count")]) -> None: ...

    else:

        @broker.subscriber(source if group else source.replay(), dead_letter="in.dead")
        async def handle(order: Order) -> None: ...

    async def dead_lettered() -> bool:
        return bool(await redis.execute("XLEN", "in.dead"))

    async with serving(app):
        await eventually(dead_lettered, within=10, what="the dead letter")
    [(_, letter)] = await entries(redis, "in.dead")
    return letter["h:x-dead-letter-error"].decode()


@pytest.mark.parametrize("group", ["g", None], ids=["group", "plain"])
async def test_an_entry_without_payload_that_fails_to_decode_says_how_to_write_entries(
    redis_server: RedisServer,
    redis: RedisClient,
    group: str | None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await redis.execute("XADD", "in", "*", "id", "1", "amount", "9.5")
    with caplog.at_level(logging.WARNING):
        error = await _dead_letter_error(redis_server, redis, group)
    assert "$.id: expected an integer, got str '1'" in error
    assert "no '_payload' field" in error
    assert "_payload <json>" in error and "broker.publish" in error
    logged = [
        r.getMessage() for r in caplog.records if "cannot decode the message" in r.getMessage()
    ]
    assert len(logged) == 1 and "no '_payload' field" in logged[0], logged
    assert "_payload <json>" in logged[0] and "broker.publish" in logged[0]


async def test_an_entry_with_payload_that_fails_to_decode_gets_no_layout_hint(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "in", "*", "_payload", b'{"id": "1", "amount": 9.5}')
    error = await _dead_letter_error(redis_server, redis, "g")
    assert "$.id: expected an integer, got str '1'" in error
    assert "_payload" not in error


async def test_a_missing_header_is_reported_as_a_header_that_cannot_be_read(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    await redis.execute("XADD", "in", "*", "_payload", b'{"id": 1, "amount": 9.5}')
    with caplog.at_level(logging.WARNING):
        error = await _dead_letter_error(redis_server, redis, "g", header=True)
    assert error.startswith("DecodeError: cannot read header 'x-count'"), error
    assert "payload" not in error
    assert "cannot read header 'x-count' of the message" in caplog.text


async def test_a_bad_header_is_reported_as_a_header_that_cannot_be_read(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute(
        "XADD", "in", "*", "_payload", b'{"id": 1, "amount": 9.5}', "h:x-count", "many"
    )
    error = await _dead_letter_error(redis_server, redis, "g", header=True)
    assert error.startswith("DecodeError: cannot read header 'x-count'"), error
    assert "many" in error and "payload" not in error
