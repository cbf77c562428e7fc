"""Consumer names that survive restarts, and that two live processes never share."""

from __future__ import annotations

import socket

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Position
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis import ConsumerNameInUse, RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient
from trio_streams.redis.streams import DEFAULT_REMOVE_IDLE

from .procs import Consumer


def member(url: str, *, consumer: str | None = None, app: str = "svc") -> tuple[App, list[int]]:
    application = App(app)
    broker = application.broker(RedisBroker(url))
    seen: list[int] = []
    source = RedisStream("s", group="g", consumer=consumer, start=Position.beginning())

    @broker.subscriber(source, name="sub", block=20)
    async def handle(n: int) -> None:
        seen.append(n)

    return application, seen


async def consumers(redis: RedisClient) -> list[str]:
    reply = await redis.execute("XINFO", "CONSUMERS", "s", "g")
    return sorted((c[b"name"] if isinstance(c, dict) else c[1]).decode() for c in reply)


# ---- "The default name is stable for one app, subscription, host and worker slot"


async def test_the_default_name_is_stable_for_app_subscription_host_and_slot(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    host = socket.gethostname()
    for _ in range(2):  # a restart comes back under the same name
        app, _ = member(redis_server.url)
        async with serving(app):
            await eventually(lambda: _named(redis), what="the consumer in the group")
        assert await consumers(redis) == [f"{host}:svc/sub:0"]


async def _named(redis: RedisClient) -> bool:
    return bool(await redis.execute("XINFO", "CONSUMERS", "s", "g"))


async def test_a_worker_slot_names_the_consumer(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRIO_STREAMS_WORKER", "3")
    app, _ = member(redis_server.url)
    async with serving(app):
        await eventually(lambda: _named(redis), what="the consumer in the group")
    assert await consumers(redis) == [f"{socket.gethostname()}:svc/sub:3"]


# ---- "Two live processes never share a name (refused, as lists already do)."


@pytest.mark.slow
async def test_a_second_live_process_under_a_given_name_is_refused(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "s", "*", "_payload", "1")
    first = Consumer(redis_server.url, "s", "g", "c1", 60, "hang")  # holds entry 1
    try:
        await first.wait_line("handling 1", within=20)
        app, _ = member(redis_server.url, consumer="c1")
        with pytest.RaisesGroup(
            pytest.RaisesExc(ConsumerNameInUse, match="'c1' of group 'g'.*another live process"),
            flatten_subgroups=True,
        ):
            async with serving(app):
                pass
        # The refused one handed nothing of the live holder's back: entry 1 is still c1's,
        # not made claimable by others.
        [(_, owner, idle_ms, _)] = await redis.execute("XPENDING", "s", "g", "-", "+", 10)
        assert owner == b"c1" and idle_ms < 60_000
    finally:
        first.stop()


async def test_two_live_processes_on_one_host_with_default_names_take_two_slots(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    first, _ = member(redis_server.url)
    second, _ = member(redis_server.url)
    async with serving(first), serving(second):
        await eventually(lambda: _two(redis), what="two consumers in the group")
    host = socket.gethostname()
    assert await consumers(redis) == [f"{host}:svc/sub:0", f"{host}:svc/sub:1"]


async def _two(redis: RedisClient) -> bool:
    return len(await redis.execute("XINFO", "CONSUMERS", "s", "g")) == 2


async def test_a_dead_holders_name_is_taken_over_after_one_renewal_period(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "s", "*", "_payload", "1")
    dead = Consumer(redis_server.url, "s", "g", "c1", 60, "ok")
    await dead.wait_line("handled 1", within=20)
    dead.kill()  # its lease lives on for a while, unrenewed
    app, _ = member(redis_server.url, consumer="c1")
    started = trio.current_time()
    with trio.fail_after(10):  # one renewal period (about 2.25 s), not the lease's 6 s
        async with serving(app):
            took = trio.current_time() - started
    assert took < 5.0


async def test_a_graceful_stop_releases_the_name_at_once(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app, _ = member(redis_server.url, consumer="c1")
    async with serving(app):
        pass
    again, _ = member(redis_server.url, consumer="c1")
    started = trio.current_time()
    async with serving(again):
        assert trio.current_time() - started < 1.0


# ---- "Dead names do not pile up ...: hygiene on by default, with the limit documented."


def test_hygiene_is_on_by_default_for_a_group_and_off_for_plain_reads() -> None:
    assert RedisStream("s").remove_idle_consumers == DEFAULT_REMOVE_IDLE == 300.0
    assert RedisStream("s").replay().remove_idle_consumers is None
    assert RedisStream("s", remove_idle_consumers=None).remove_idle_consumers is None
    with pytest.raises(ConfigurationError, match="needs a consumer group"):
        RedisStream("s", remove_idle_consumers=30).tail()


async def test_dead_names_with_nothing_pending_are_removed(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    for name in ("gone-1", "gone-2"):
        await redis.execute("XGROUP", "CREATECONSUMER", "s", "g", name)
    application = App("svc")
    broker = application.broker(RedisBroker(redis_server.url))
    source = RedisStream("s", group="g", remove_idle_consumers=1)

    @broker.subscriber(source, name="sub", block=20)
    async def handle(n: int) -> None: ...

    async with serving(application):

        async def only_this_one() -> bool:
            return len(await consumers(redis)) == 1

        await eventually(only_this_one, within=10, what="the dead names removed")
    assert await consumers(redis) == [f"{socket.gethostname()}:svc/sub:0"]
