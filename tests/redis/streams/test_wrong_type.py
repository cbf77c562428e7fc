"""A stream key (or its delay set) that holds another type fails the start with one typed
error naming the key, the group and the type it holds, never a raw ``WRONGTYPE`` reply."""

from __future__ import annotations

import pytest
import trio

from tests.cli.support import cli, stderr_lines
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, AppFailed, Position
from trio_streams.redis import RedisBroker, RedisStream, WrongKeyType
from trio_streams.redis.client import RedisClient
from trio_streams.redis.delays import delay_key

#: A command that leaves ``s`` holding each type a stream key may be found holding instead.
FILLS = {
    "string": ("SET", "s", "text"),
    "list": ("RPUSH", "s", "a"),
    "hash": ("HSET", "s", "f", "v"),
}


def _app(url: str, source: RedisStream) -> App:
    app = App("svc")
    broker = app.broker(RedisBroker(url))

    @broker.subscriber(source, name="sub", block=20)
    async def handle(n: int) -> None: ...

    return app


@pytest.mark.parametrize("kind", sorted(FILLS))
async def test_a_group_on_a_key_of_another_type_fails_the_start_naming_key_group_and_type(
    redis_server: RedisServer, redis: RedisClient, kind: str
) -> None:
    await redis.execute(*FILLS[kind])
    app = _app(redis_server.url, RedisStream("s", group="g"))
    expected = (
        f"sub: key 's' holds a {kind}, not a stream, so it cannot be used as the stream of "
        "consumer group 'g'; use another key, or delete this one"
    )
    with pytest.RaisesGroup(pytest.RaisesExc(WrongKeyType, match=f"^{expected}$")):
        async with serving(app):
            pass


async def test_a_stream_key_replaced_by_another_type_while_running_fails_the_app_naming_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = _app(redis_server.url, RedisStream("s", group="g"))
    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed)) as failed, trio.fail_after(10):
        async with serving(app):
            replace = "redis.call('DEL', KEYS[1]); return redis.call('SET', KEYS[1], 'text')"
            await redis.execute("EVAL", replace, 1, "s")  # in one step: a string now
            await trio.sleep_forever()
    [error] = failed.value.exceptions
    assert isinstance(error.__cause__, WrongKeyType)
    assert str(error.__cause__) == (
        "sub: key 's' holds a string, not a stream, so it cannot be used as the stream of "
        "consumer group 'g'; use another key, or delete this one"
    )


@pytest.mark.parametrize("kind", sorted(FILLS))
async def test_a_delay_set_of_another_type_fails_the_start_of_a_group_naming_it(
    redis_server: RedisServer, redis: RedisClient, kind: str
) -> None:
    key = delay_key("s")
    command, _, *rest = FILLS[kind]
    await redis.execute(command, key, *rest)
    app = _app(redis_server.url, RedisStream("s", group="g"))
    expected = f"key '{key}' holds a {kind}, not a zset, so it cannot be used as the delayed"
    with pytest.RaisesGroup(pytest.RaisesExc(WrongKeyType, match=expected)):
        async with serving(app):
            pass


@pytest.mark.parametrize("read", ["replay", "tail"])
async def test_a_plain_read_of_a_key_of_another_type_fails_the_start_naming_it(
    redis_server: RedisServer, redis: RedisClient, read: str
) -> None:
    await redis.execute("HSET", "s", "f", "v")
    stream = RedisStream("s", start=Position.beginning())
    app = _app(redis_server.url, stream.replay() if read == "replay" else stream.tail())
    expected = f"sub: key 's' holds a hash, not a stream, so it cannot be used for a {read}"
    with pytest.RaisesGroup(pytest.RaisesExc(WrongKeyType, match=expected)):
        async with serving(app):
            pass


def test_trio_streams_run_reports_a_key_of_another_type_in_one_line(
    redis_server: RedisServer,
) -> None:
    redis_server.command("RPUSH", "orders", "a")
    result = cli(
        "run",
        "tests.redis.streams.wrong_type_app:app",
        env={"TS_TEST_REDIS_URL": redis_server.url},
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "WRONGTYPE" not in result.stderr
    assert stderr_lines(result)[-1] == (
        "trio-streams run: app 'orders' did not start: bill: key 'orders' holds a list, not a "
        "stream, so it cannot be used as the stream of consumer group 'billing'; use another "
        "key, or delete this one"
    )
