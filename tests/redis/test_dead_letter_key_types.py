"""A dead-letter key that holds another type is refused at the start, like the stream key,
with one line naming the key, the type it must be and the type it holds; and a Redis error
reply met later never puts a Lua script's text in the log, only what the script is for."""

from __future__ import annotations

import logging

import pytest
import trio

from tests.cli.support import cli
from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Destination, Position
from trio_streams.core.codec import encode
from trio_streams.core.errors import WrongKeyType
from trio_streams.core.transport import Source
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream
from trio_streams.redis.client import RedisClient
from trio_streams.redis.client.errors import describe_command
from trio_streams.redis.client.scripts import Script
from trio_streams.redis.wire import encode_fields

#: Each kind of Redis subscription with a dead letter in a key, and the type that key takes.
SOURCES: dict[str, tuple[Source, str]] = {
    "group": (RedisStream("orders", group="g", start=Position.beginning()), "stream"),
    "plain stream": (RedisStream("orders", start=Position.beginning()), "stream"),
    "simple list": (RedisList("orders"), "list"),
    "reliable list": (RedisList("orders", reliable=True), "list"),
    "list to a stream": (RedisList("orders", dead_letter_kind="stream"), "stream"),
    "channel to a stream": (RedisChannel("orders", dead_letter_kind="stream"), "stream"),
}


def _app(url: str, source: Source, dead_letter: str = "orders.dead") -> App:
    app = App("svc")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(source, name="orders", max_attempts=1, dead_letter=dead_letter)
    async def handle(n: int) -> None:
        raise ValueError(f"refused {n}")

    return app


@pytest.mark.parametrize("name", sorted(SOURCES))
async def test_a_dead_letter_key_of_the_wrong_type_is_refused_at_start_naming_key_and_types(
    redis_server: RedisServer, redis: RedisClient, name: str
) -> None:
    source, expected = SOURCES[name]
    await redis.execute("SET", "orders.dead", "text")
    message = (
        f"orders: key 'orders.dead' holds a string, not a {expected}, so it cannot be used as "
        "the dead letters of the subscription; use another key, or delete this one"
    )
    with pytest.RaisesGroup(pytest.RaisesExc(WrongKeyType, match=f"^{message}$")):
        async with serving(_app(redis_server.url, source)):
            pass


@pytest.mark.parametrize("name", sorted(SOURCES))
async def test_a_dead_letter_key_that_is_missing_or_of_its_type_lets_the_app_start(
    redis_server: RedisServer, redis: RedisClient, name: str
) -> None:
    source, expected = SOURCES[name]
    if expected == "stream":
        await redis.execute("XADD", "orders.dead", "*", "f", "v")
    else:
        await redis.execute("RPUSH", "orders.dead", "earlier")
    async with serving(_app(redis_server.url, source)):
        pass
    await redis.execute("DEL", "orders.dead")
    async with serving(_app(redis_server.url, source)):
        pass


async def test_a_channel_dead_letter_is_no_key_and_a_key_of_its_name_is_not_checked(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("SET", "orders.dead", "text")
    async with serving(_app(redis_server.url, RedisChannel("orders"))):
        pass


def test_trio_streams_run_refuses_the_dead_letter_key_in_one_line_with_status_1(
    redis_server: RedisServer,
) -> None:
    redis_server.command("SET", "orders.dead", "text")
    result = cli(
        "run",
        "tests.redis.fault_app:app",
        env={"TS_TEST_REDIS_URL": redis_server.url, "TS_TEST_DEAD_LETTER": "orders.dead"},
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    [line] = [line for line in result.stderr.splitlines() if "orders.dead" in line]
    assert "key 'orders.dead' holds a string, not a stream" in line, result.stderr


async def test_a_redis_error_reply_names_the_script_by_its_purpose_never_its_text(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_streams")
    source = RedisStream("orders", group="g", start=Position.beginning())
    async with serving(_app(redis_server.url, source)):
        await redis.execute("SET", "orders.dead", "text")  # after the start: met at the letter
        await redis.execute("XADD", "orders", "*", *encode_fields(encode(1), {}))

        async def faulted() -> bool:
            await trio.lowlevel.checkpoint()
            return any("fault 'settle'" in r.getMessage() for r in caplog.records)

        await eventually(faulted, within=20, what="the fault 'settle' in the log")
    [line] = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "fault 'settle'" in r.getMessage()
    ]
    assert "EVAL (script: copy an entry to a stream, then acknowledge it)" in line, line
    everything = caplog.text + "".join(r.getMessage() for r in caplog.records)
    assert "redis.call" not in everything


def test_a_script_without_a_purpose_is_described_by_its_length_only() -> None:
    assert describe_command(("EVAL", "return redis.call('GET', KEYS[1])", 1, "k")) == (
        "EVAL (a script of 33 characters)"
    )
    named = Script("return 1", purpose="answer one")
    assert describe_command(("EVAL", named, 0)) == "EVAL (script: answer one)"
    assert describe_command(("eval_ro", named, 0)) == "EVAL_RO (script: answer one)"


@pytest.mark.parametrize(
    ("destination", "fill", "expected", "holds"),
    [
        (Destination.stream("results"), ("SET", "results", "text"), "stream", "string"),
        (Destination.list("results"), ("XADD", "results", "*", "f", "v"), "list", "stream"),
    ],
)
async def test_a_handler_publishing_to_a_key_of_another_type_is_refused_at_start(
    redis_server: RedisServer,
    redis: RedisClient,
    destination: Destination,
    fill: tuple[str, ...],
    expected: str,
    holds: str,
) -> None:
    await redis.execute(*fill)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("orders", group="g"), name="orders")
    @broker.publisher(destination)
    async def handle(n: int) -> int:
        return n

    message = (
        f"orders: key 'results' holds a {holds}, not a {expected}, so it cannot be used as the "
        f"{expected} its handler publishes to; use another key, or delete this one"
    )
    with pytest.RaisesGroup(pytest.RaisesExc(WrongKeyType, match=f"^{message}$")):
        async with serving(app):
            pass


async def test_a_handler_publishing_to_a_channel_or_a_missing_key_starts(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("SET", "news", "text")  # a channel is no key: not checked
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("orders", group="g"), name="orders")
    @broker.publisher(Destination.channel("news"))
    @broker.publisher("results")
    async def handle(n: int) -> int:
        return n

    async with serving(app):
        pass
