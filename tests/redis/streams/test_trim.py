"""Trimming never cuts what a consumer group has not acknowledged, unless told it may.

Each sentence of the contract is tested with every safe form the server runs: ``"groups"``
(the bound computed from the groups, any server), ``"acked"`` (the server's ``XADD … ACKED``,
where it takes it) and ``"safe"`` (the default: the groups bound on every server). The groups are
driven by hand (``XREADGROUP``/``XACK``), as other services reading the stream would.
"""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import hiredis
import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer, redis_binary
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.core.errors import ConfigurationError, UnsupportedError
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.client.capabilities import parse_command_tokens

from .support import entries, pending_count

NO_ACKED = "{} does not take XADD … ACKED: the ACKED form is tested where the server has it"


def takes_acked(server: RedisServer) -> bool:
    """Whether ``server``'s ``XADD`` takes ``ACKED``, read from its ``COMMAND DOCS`` as the
    broker reads it (synchronously: a fixture skipping from inside Trio loses its reason)."""
    with socket.create_connection(server.address, timeout=5) as sock:
        sock.sendall(b"*3\r\n$7\r\nCOMMAND\r\n$4\r\nDOCS\r\n$4\r\nxadd\r\n")
        reader = hiredis.Reader()
        while (reply := reader.gets()) is False:
            reader.feed(sock.recv(65536))
    return "ACKED" in parse_command_tokens(reply).get("xadd", frozenset())


@pytest.fixture(params=["groups", "acked", "safe"])
def form(request: pytest.FixtureRequest, redis_server: RedisServer) -> str:
    """Each safe form: ``"acked"`` only on a server that takes it (a skip naming the binary
    elsewhere, where its refusal is tested instead)."""
    if request.param == "acked" and not takes_acked(redis_server):
        pytest.skip(NO_ACKED.format(redis_binary()))
    return str(request.param)


@pytest.fixture
def acked_server(redis_server: RedisServer) -> RedisServer:
    """:func:`redis_server`, for a test of the ``ACKED`` form (a skip naming the binary on a
    server without it)."""
    if not takes_acked(redis_server):
        pytest.skip(NO_ACKED.format(redis_binary()))
    return redis_server


@asynccontextmanager
async def publishing(url: str, form: str, **options: Any) -> AsyncIterator[RedisBroker]:
    """A served app whose broker publishes with trim ``form``."""
    app = App("pub")
    broker = app.broker(RedisBroker(url, trim=form, **options))  # type: ignore[arg-type]
    async with serving(app):
        yield broker


async def ids(redis: RedisClient, key: str) -> list[str]:
    return [entry_id for entry_id, _ in await entries(redis, key)]


async def read(
    redis: RedisClient, key: str, group: str, count: int, consumer: str = "c"
) -> list[str]:
    reply: Any = await redis.execute(
        "XREADGROUP", "GROUP", group, consumer, "COUNT", count, "STREAMS", key, ">"
    )
    if not reply:
        return []
    [(_, batch)] = reply.items() if isinstance(reply, dict) else reply
    return [entry_id.decode() for entry_id, _ in batch]


async def ack(redis: RedisClient, key: str, group: str, entry_ids: list[str]) -> None:
    assert await redis.execute("XACK", key, group, *entry_ids) == len(entry_ids)


async def seed(redis: RedisClient, key: str, n: int, *groups: str) -> list[str]:
    """``n`` entries, then ``groups`` created at ``0`` (nothing read)."""
    added = [(await redis.execute("XADD", key, "*", "_payload", str(i))).decode() for i in range(n)]
    for group in groups:
        await redis.execute("XGROUP", "CREATE", key, group, "0")
    return added


async def test_an_entry_a_group_has_not_read_survives_a_trim_that_would_cut_it(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    old = await seed(redis, "s", 5, "g")
    async with publishing(redis_server.url, form, maxlen=1, exact_trim=True) as broker:
        await broker.publish("s", "new")
    assert (await ids(redis, "s"))[:5] == old  # the group read nothing: all kept


async def test_an_entry_read_but_pending_survives_a_trim_that_would_cut_it(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    old = await seed(redis, "s", 5, "g")
    assert await read(redis, "s", "g", 5) == old  # all read, none acknowledged
    async with publishing(redis_server.url, form, maxlen=1, exact_trim=True) as broker:
        await broker.publish("s", "new")
    assert (await ids(redis, "s"))[:5] == old


async def test_entries_a_dead_consumer_held_survive_and_are_reclaimed_whole(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    old = await seed(redis, "s", 3, "g")
    await read(redis, "s", "g", 3, consumer="died")  # its process is gone; the entries pending
    async with publishing(redis_server.url, form, maxlen=0, exact_trim=True) as broker:
        await broker.publish("s", "new")
    reply: Any = await redis.execute("XAUTOCLAIM", "s", "g", "heir", 0, "0-0", "COUNT", 10)
    claimed = reply[1]
    assert [entry_id.decode() for entry_id, _ in claimed] == old
    assert all(fields for _, fields in claimed)  # not trimmed away under the claim


async def test_an_entry_acknowledged_by_every_group_is_trimmed(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    old = await seed(redis, "s", 5, "g1", "g2")
    for group in ("g1", "g2"):
        await ack(redis, "s", group, await read(redis, "s", group, 3))
    async with publishing(redis_server.url, form, maxlen=1, exact_trim=True) as broker:
        await broker.publish("s", "new")
    left = await ids(redis, "s")
    assert left[:2] == old[3:] and len(left) == 3  # the three acknowledged by both are gone


async def test_with_several_groups_the_slowest_governs(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    old = await seed(redis, "s", 6, "fast", "slow", "pending")
    await ack(redis, "s", "fast", await read(redis, "s", "fast", 6))
    await ack(redis, "s", "slow", await read(redis, "s", "slow", 2))  # 4 unread
    await ack(redis, "s", "pending", await read(redis, "s", "pending", 6))
    async with publishing(redis_server.url, form, maxlen=0, exact_trim=True) as broker:
        await broker.publish("s", "new")
        assert (await ids(redis, "s"))[:4] == old[2:]  # what "slow" has not read
        await ack(redis, "s", "slow", await read(redis, "s", "slow", 2))
        await broker.publish("s", "newer")
        assert (await ids(redis, "s"))[:2] == old[4:]


async def test_the_maxlen_still_bounds_the_stream_once_groups_acknowledged(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    await seed(redis, "s", 0)
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    async with publishing(redis_server.url, form, maxlen=3, exact_trim=True) as broker:
        for n in range(10):
            await broker.publish("s", n)
        assert len(await ids(redis, "s")) == 10  # nothing acknowledged yet
        await ack(redis, "s", "g", await read(redis, "s", "g", 100))
        await broker.publish("s", 10)
        left = [f["_payload"] for _, f in await entries(redis, "s")]
        assert left == [b"8", b"9", b"10"]  # maxlen, not the groups, is the bound now


async def test_minid_still_bounds_the_stream_once_groups_acknowledged(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    for n in range(1, 7):
        await redis.execute("XADD", "s", f"{n}-0", "_payload", str(n))
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    await ack(redis, "s", "g", await read(redis, "s", "g", 4))  # 1..4 done, 5 and 6 unread
    async with publishing(redis_server.url, form, minid="3-0", exact_trim=True) as broker:
        await broker.publish("s", "new")
    assert (await ids(redis, "s"))[:4] == ["3-0", "4-0", "5-0", "6-0"]  # never below minid


async def test_a_group_at_0_0_keeps_the_whole_stream(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    old = await seed(redis, "s", 4, "done")
    await ack(redis, "s", "done", await read(redis, "s", "done", 4))
    await redis.execute("XGROUP", "CREATE", "s", "late", "0-0")  # has read nothing
    async with publishing(redis_server.url, form, maxlen=0, exact_trim=True) as broker:
        await broker.publish("s", "new")
    assert (await ids(redis, "s"))[:4] == old


async def test_a_group_created_after_a_trim_starts_from_what_is_left(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    await seed(redis, "s", 4, "g")
    await ack(redis, "s", "g", await read(redis, "s", "g", 4))
    async with publishing(redis_server.url, form, maxlen=1, exact_trim=True) as broker:
        await broker.publish("s", "new")
        await redis.execute("XGROUP", "CREATE", "s", "later", "0")
        assert len(await read(redis, "s", "later", 10)) == 1  # the entries left, no more
        await broker.publish("s", "newer")
    assert [f["_payload"] for _, f in await entries(redis, "s")][-2:] == [b"new", b"newer"]


async def test_a_stream_with_no_group_is_trimmed_as_maxlen_says(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    await seed(redis, "s", 5)
    async with publishing(redis_server.url, form, maxlen=2, exact_trim=True) as broker:
        await broker.publish("s", "new")
    assert len(await ids(redis, "s")) == 2


async def test_the_default_trim_bounds_again_once_the_group_holding_it_back_is_destroyed(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    # XGROUP DESTROY is the guide's remedy for a group gone for good. On Redis 8.2.3 an ACKED
    # trim held back by a group keeps that bound after the group is destroyed, and trims
    # nothing more: the default must not be that.
    await seed(redis, "s", 10, "stalled")
    await redis.execute("XGROUP", "CREATE", "s", "live", "$")
    async with publishing(redis_server.url, "safe", maxlen=5, exact_trim=True) as broker:
        await broker.publish("s", "x")
        assert await redis.execute("XLEN", "s") == 11  # "stalled" read nothing: all kept
        await redis.execute("XGROUP", "DESTROY", "s", "stalled")
        for _ in range(20):
            await broker.publish("s", "x")
            await redis.execute("XGROUP", "SETID", "s", "live", "$")  # "live" keeps up
        await broker.publish("s", "x")
    assert await redis.execute("XLEN", "s") == 5


async def test_the_unsafe_trim_loses_entries_no_group_has_read(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    old = await seed(redis, "s", 5, "g")
    app = App("pub")
    broker = app.broker(RedisBroker(redis_server.url, maxlen=1, exact_trim=True, trim="unsafe"))
    async with serving(app):
        await broker.publish("s", "new")
    assert not set(old) & set(await ids(redis, "s"))  # gone, though "g" never read them


@pytest.mark.parametrize("form", ["groups", "safe"])
async def test_a_safe_trim_runs_every_trim_every_publishes(
    redis_server: RedisServer, redis: RedisClient, form: str
) -> None:
    await seed(redis, "s", 0)
    options = {"maxlen": 1, "exact_trim": True, "trim_every": 5}
    async with publishing(redis_server.url, form, **options) as broker:
        lengths = []
        for n in range(11):
            await broker.publish("s", n)
            lengths.append(len(await ids(redis, "s")))
    # The first publish trims, then the 6th and the 11th; between them the stream grows.
    assert lengths == [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1]


async def test_acked_and_groups_differ_after_a_stuck_pending_entry(
    acked_server: RedisServer, redis: RedisClient
) -> None:
    """``ACKED`` removes what every group acknowledged, even after an entry still pending;
    the groups bound keeps everything from the oldest pending entry on."""
    old = await seed(redis, "s", 4, "g")
    await ack(redis, "s", "g", (await read(redis, "s", "g", 4))[1:])  # the first stays pending
    await redis.execute("COPY", "s", "t")
    for key, form in (("s", "acked"), ("t", "groups")):
        async with publishing(acked_server.url, form, maxlen=0, exact_trim=True) as broker:
            await broker.publish(key, "new")
    assert (await ids(redis, "s"))[:-1] == old[:1]
    assert (await ids(redis, "t"))[:-1] == old


async def test_trim_acked_is_refused_at_connect_by_a_server_without_it(
    redis_server: RedisServer,
) -> None:
    broker = RedisBroker(redis_server.url, maxlen=10, trim="acked")
    if takes_acked(redis_server):
        async with broker.connect():
            return  # taken: nothing to refuse
    with pytest.raises(UnsupportedError, match="trim='acked' needs XADD … ACKED, which redis"):
        async with broker.connect():
            pass


async def test_the_safe_trim_holds_under_the_pipeline_window(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """A window subscription's deliveries stay pending until its flush: the trims of the
    publishes made meanwhile keep them; once acknowledged, ``maxlen`` applies."""
    old = await seed(redis, "s", 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url, maxlen=1, exact_trim=True))
    release = trio.Event()
    holding = 0
    all_held = trio.Event()

    @broker.subscriber(
        RedisStream("s", group="g", start=Position.beginning()), pipeline=True, count=3, workers=3
    )
    async def handle(n: int, ctx: Context) -> None:
        nonlocal holding
        ctx.pipeline.incr("handled")
        holding += 1
        if holding == 3:
            all_held.set()
        await release.wait()

    async with serving(app):
        with trio.fail_after(10):
            await all_held.wait()
        await broker.publish("s", 3)  # a trim is due: the three are pending in the window
        assert (await ids(redis, "s"))[:3] == old
        release.set()

        async def all_handled() -> bool:
            return await redis.execute("GET", "handled") == b"4" and not await pending_count(
                redis, "s", "g"
            )

        await eventually(all_handled, what="the four entries handled and acknowledged")
        await broker.publish("s", 4)
        assert [f["_payload"] for _, f in await entries(redis, "s")] == [b"4"]


async def test_a_cluster_stream_keeps_what_its_group_has_not_read(redis_cluster: Any) -> None:
    key = "{trim}s"
    async with connect(redis_cluster.url) as redis:
        await redis.execute("DEL", key)
        old = await seed(redis, key, 4, "g")
        await ack(redis, key, "g", await read(redis, key, "g", 2))
        app = App("pub")
        broker = app.broker(RedisBroker(redis_cluster.url, maxlen=0, exact_trim=True))
        async with serving(app):
            await broker.publish(key, "new")
        assert (await ids(redis, key))[:2] == old[2:]
        assert len(await ids(redis, key)) == 3


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"maxlen": 10, "trim": "sometimes"}, "trim takes one of 'safe', 'acked', 'groups', 'unsafe'"),
    ({"trim": "safe"}, "trim='safe' says how maxlen= or minid= trims"),
    ({"trim_every": 10}, "trim_every=10 says how maxlen= or minid= trims"),
    ({"maxlen": 10, "trim_every": 0}, "trim_every takes an int >= 1"),
    ({"maxlen": 10, "trim_every": True}, "trim_every takes an int >= 1"),
    ({"maxlen": 10, "trim": "unsafe", "trim_every": 5}, "trim='unsafe' trims with every XADD"),
    ({"maxlen": 10, "exact_trim": "yes"}, "exact_trim is True or False"),
    ({"maxlen": 10, "minid": "1-0"}, "not both"),
    ({"maxlen": -1}, "maxlen must be >= 0"),
    ({"minid": "soon"}, "minid takes an entry id"),
]


@pytest.mark.parametrize(("options", "message"), REFUSED)
def test_bad_trim_options_are_refused_naming_the_option(
    options: dict[str, Any], message: str
) -> None:
    with pytest.raises(ConfigurationError, match=message):
        RedisBroker("redis://localhost", **options)


def test_the_default_trim_is_the_safe_one() -> None:
    policy = RedisBroker("redis://localhost", maxlen=10).trim
    assert policy is not None and policy.trim == "safe" and not policy.loses_unread
    assert policy.every == 100
    exact = RedisBroker("redis://localhost", maxlen=10, exact_trim=True).trim
    assert exact is not None and exact.every == 1
    unsafe = RedisBroker("redis://localhost", maxlen=10, trim="unsafe").trim
    assert unsafe is not None and unsafe.loses_unread
    assert RedisBroker("redis://localhost").trim is None


@pytest.mark.parametrize("trim", ["safe", "acked", "groups", "unsafe"])
async def test_app_test_accepts_the_same_trim_options(trim: str) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://localhost", maxlen=2, trim=trim))  # type: ignore[arg-type]
    seen: list[int] = []

    @broker.subscriber(RedisStream("s", group="g"))
    async def handle(n: int) -> None:
        seen.append(n)

    async with app.test() as t:
        for n in range(3):
            await t.publish("s", n)
    assert seen == [0, 1, 2]


@pytest.mark.parametrize(("options", "message"), REFUSED)
async def test_app_test_refuses_the_same_trim_options(
    options: dict[str, Any], message: str
) -> None:
    """The options are checked where the broker is declared, before ``app.test()`` or a
    server is involved: the same refusal either way."""
    app = App("svc")
    with pytest.raises(ConfigurationError, match=message):
        app.broker(RedisBroker("redis://localhost", **options))
