"""Publishing with XADD, the wire format, and reading through a consumer group."""

from __future__ import annotations

import socket

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient

from .support import entries, pending_count


async def test_publish_writes_the_payload_in_payload_and_each_header_in_h_name(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pub")
    broker = app.broker(RedisBroker(redis_server.url))
    async with serving(app):
        receipt = await broker.publish("orders", {"id": 1}, headers={"trace": "t1"})
    [(entry_id, fields)] = await entries(redis, "orders")
    assert fields == {"_payload": b'{"id":1}', "h:trace": b"t1"}
    assert receipt == Position.entry(entry_id, stream="orders")


async def test_publish_trims_with_maxlen_when_asked(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("pub")
    broker = app.broker(RedisBroker(redis_server.url, maxlen=5, exact_trim=True))
    async with serving(app):
        for n in range(20):
            await broker.publish("orders", n)
    assert [f["_payload"] for _, f in await entries(redis, "orders")] == [
        str(n).encode() for n in range(15, 20)
    ]


async def test_the_group_is_created_at_open_with_mkstream_at_the_tip_by_default(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "s", "*", "_payload", b"1")  # before the tip
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    got = trio.Event()

    @broker.subscriber(RedisStream("s", group="g"))
    async def handle(n: int) -> None:
        seen.append(n)
        got.set()

    async with serving(app):
        groups = await redis.execute("XINFO", "GROUPS", "s")
        assert len(groups) == 1
        await broker.publish("s", 2)
        with trio.fail_after(10):
            await got.wait()
    assert seen == [2]


async def test_a_group_on_a_missing_stream_creates_the_stream(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("fresh", group="g"))
    async def handle(n: int) -> None: ...

    async with serving(app):
        assert await redis.execute("EXISTS", "fresh") == 1


async def test_a_group_can_start_at_the_beginning_or_at_an_entry_id_inclusive(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    ids = [await redis.execute("XADD", "s", f"0-{n}", "_payload", str(n)) for n in range(1, 6)]
    assert ids[2] == b"0-3"
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    got: dict[str, list[int]] = {"all": [], "from3": []}
    done = trio.Event()

    def note(which: str, n: int) -> None:
        got[which].append(n)
        if len(got["all"]) == 5 and len(got["from3"]) == 3:
            done.set()

    @broker.subscriber(RedisStream("s", group="all", start=Position.beginning()))
    async def every(n: int) -> None:
        note("all", n)

    @broker.subscriber(RedisStream("s", group="from3", start=Position.entry("0-3")))
    async def later(n: int) -> None:
        note("from3", n)

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
    assert got == {"all": [1, 2, 3, 4, 5], "from3": [3, 4, 5]}


async def test_an_existing_group_is_accepted_where_it_is(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "s", "0-1", "_payload", b"1")
    await redis.execute("XADD", "s", "0-2", "_payload", b"2")
    await redis.execute("XGROUP", "CREATE", "s", "g", "0-1")  # only 0-2 is new to it
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    got = trio.Event()

    @broker.subscriber(RedisStream("s", group="g", start=Position.beginning()))
    async def handle(n: int) -> None:
        seen.append(n)
        got.set()

    async with serving(app):
        with trio.fail_after(10):
            await got.wait()
    assert seen == [2]


async def test_an_entry_from_another_producer_without_payload_delivers_its_fields_as_json(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    got: list[dict[str, str]] = []
    done = trio.Event()

    @broker.subscriber(RedisStream("s", group="g"))
    async def handle(fields: dict[str, str]) -> None:
        got.append(fields)
        done.set()

    async with serving(app):
        await redis.execute("XADD", "s", "*", "sensor", "t1", "value", "21.5")
        with trio.fail_after(10):
            await done.wait()
    assert got == [{"sensor": "t1", "value": "21.5"}]


async def test_ack_and_drop_are_sent_as_one_xack_per_read_and_the_pel_empties(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in range(1, 51):
        await redis.execute("XADD", "s", f"0-{n}", "_payload", str(n))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(RedisStream("s", group="g", start=Position.beginning()), count=10, workers=4)
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 50:
            done.set()

    await redis.execute("CONFIG", "RESETSTAT")
    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
        await eventually(lambda: _zero(redis), what="an empty PEL")
    info = await redis.execute("INFO", "commandstats")
    text = info.decode() if isinstance(info, bytes) else str(info)
    xack = [line for line in text.splitlines() if line.startswith("cmdstat_xack:")]
    calls = int(xack[0].split("calls=")[1].split(",")[0])
    assert calls == 5  # 50 entries read 10 at a time
    assert sorted(seen) == list(range(1, 51))


async def _zero(redis: RedisClient) -> bool:
    return await pending_count(redis, "s", "g") == 0


async def test_default_consumer_names_are_stable_per_app_subscription_host_and_slot(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("a", group="g"), name="one", block=10)
    async def one(n: int) -> None: ...

    @broker.subscriber(RedisStream("b", group="g", consumer="stable-1"), block=10)
    async def two(n: int) -> None: ...

    async with serving(app):

        async def consumers_known() -> bool:
            return bool(await redis.execute("XINFO", "CONSUMERS", "a", "g")) and bool(
                await redis.execute("XINFO", "CONSUMERS", "b", "g")
            )

        await eventually(consumers_known, what="both consumers")
        [a] = await redis.execute("XINFO", "CONSUMERS", "a", "g")
        [b] = await redis.execute("XINFO", "CONSUMERS", "b", "g")
    name_a = (a[b"name"] if isinstance(a, dict) else a[1]).decode()
    name_b = (b[b"name"] if isinstance(b, dict) else b[1]).decode()

    assert name_a == f"{socket.gethostname()}:svc/one:0"
    assert name_b == "stable-1"


def test_bad_source_arguments_are_refused_where_they_are_given() -> None:
    with pytest.raises(ConfigurationError, match="a Redis stream starts at"):
        RedisStream("s", start=Position.sequence(3))
    with pytest.raises(ConfigurationError, match="on_nogroup"):
        RedisStream("s", on_nogroup="retry")
    with pytest.raises(ConfigurationError, match="min_idle"):
        RedisStream("s", min_idle=0)
    broker = RedisBroker("redis://127.0.0.1:1")

    async def handle(n: int) -> None: ...

    with pytest.raises(ConfigurationError, match="block"):
        broker.subscriber(RedisStream("s"), block=0)(handle)


async def test_in_process_the_same_app_runs_as_a_memory_consumer_group() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1", group="workers"))
    seen: list[tuple[int, int]] = []

    @broker.subscriber(RedisStream("s"), max_attempts=2)
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.attempt))
        raise ValueError("no")

    [subscription] = broker.subscriptions
    assert isinstance(subscription.source, RedisStream)
    assert subscription.source.group == "workers"
    assert subscription.source.in_process().group == "workers"
    async with app.test() as t:
        await t.publish("s", 7)
    assert seen == [(7, 1), (7, 2)]


async def test_a_group_reads_the_same_over_resp2(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await redis.execute("XADD", "s", "0-1", "_payload", "1", "h:k", "v")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + "?protocol=2"))
    seen: list[tuple[int, str]] = []
    got = trio.Event()

    @broker.subscriber(RedisStream("s", group="g", start=Position.beginning()), block=50)
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.headers["k"]))
        got.set()

    async with serving(app):
        with trio.fail_after(10):
            await got.wait()
        await eventually(lambda: _zero(redis), what="an empty PEL")
    assert seen == [(1, "v")]
