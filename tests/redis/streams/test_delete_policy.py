"""``delete_on_ack`` and its ``delete_policy``: one ``XACKDEL`` where the server has it, else
``XACK`` and ``XDEL`` in one transaction; what becomes of other groups' references.

Which path a server takes is read from its command table, so each test is right on every
server of the matrix (Redis 7.0 and Valkey 8.0/9.1 have no ``XACKDEL``; Redis 8.2 has it).
What was sent is read back from the server (``INFO commandstats``) or at the client's socket.
"""

from __future__ import annotations

import pytest
import trio

from tests.redis.streams.support import pending_count
from tests.redis.window.support import Writes, calls
from tests.redis.window.test_window import drained, fill
from tests.redis_servers import RedisClusterServers, RedisServer
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.core.errors import ConfigurationError, UnsupportedError
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.streams import DeletePolicy

BEGINNING = Position.beginning()


async def _has_xackdel(redis: RedisClient) -> bool:
    return (await redis.server_commands()).has("xackdel")


async def _other_group_holds(redis: RedisClient, count: int, *, acked: int = 0) -> None:
    """Group ``other`` reads the first ``count`` entries (they are pending there) and
    acknowledges the first ``acked`` of them."""
    await redis.execute("XGROUP", "CREATE", "s", "other", "0")
    await redis.execute("XREADGROUP", "GROUP", "other", "o", "COUNT", count, "STREAMS", "s", ">")
    if acked:
        await redis.execute("XACK", "s", "other", *[f"{n}-0" for n in range(1, acked + 1)])


def _app(url: str, policy: str | None, *, pipeline: bool = False, atomic: bool = False) -> App:
    app = App("svc")
    broker = app.broker(RedisBroker(url))
    source = RedisStream("s", group="g", start=BEGINNING, delete_on_ack=True, delete_policy=policy)

    @broker.subscriber(source, name="sub", pipeline=pipeline, atomic=atomic)
    async def handle(n: int, ctx: Context) -> None:
        if pipeline:
            ctx.pipeline.incr(f"n:{n}")

    return app


async def _stream_ids(redis: RedisClient) -> list[bytes]:
    return [entry[0] for entry in await redis.execute("XRANGE", "s", "-", "+")]


async def _pending_ids(redis: RedisClient, group: str) -> list[bytes]:
    return [row[0] for row in await redis.execute("XPENDING", "s", group, "-", "+", 100)]


# ---- "XACKDEL for delete_on_ack: one command instead of XACK+XDEL in MULTI/EXEC"


@pytest.mark.parametrize("window", ["plain", "pipeline", "atomic"])
async def test_delete_on_ack_is_one_xackdel_where_the_server_has_it_else_xack_and_xdel(
    redis_server: RedisServer, redis: RedisClient, window: str
) -> None:
    await fill(redis, "s", 3)
    options = {"pipeline": window != "plain", "atomic": window == "atomic"}
    async with serving(_app(redis_server.url, None, **options)):
        await drained(redis)
    stats = await redis.execute("INFO", "commandstats")
    assert await redis.execute("XLEN", "s") == 0
    if await _has_xackdel(redis):
        assert calls(stats, "xackdel") >= 1
        assert calls(stats, "xack") == calls(stats, "xdel") == 0
    else:
        assert calls(stats, "xack") >= 1 and calls(stats, "xdel") == calls(stats, "xack")
        assert calls(stats, "multi") >= 1  # XACK and XDEL travel together
    if window != "plain":
        assert [await redis.execute("GET", f"n:{n}") for n in (1, 2, 3)] == [b"1"] * 3


async def test_the_xackdel_of_a_read_names_the_policy_and_every_id(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, "s", 2)
    writes = Writes().install(monkeypatch)
    async with serving(_app(redis_server.url, "keepref", pipeline=True)):
        await drained(redis)
    if await _has_xackdel(redis):
        assert writes.with_command(b"XACKDEL") == [
            [
                (b"INCR", b"n:1"),
                (b"INCR", b"n:2"),
                (b"XACKDEL", b"s", b"g", b"KEEPREF", b"IDS", b"2", b"1-0", b"2-0"),
            ]
        ]
    else:
        assert writes.with_command(b"XACKDEL") == []
        [write] = writes.with_command(b"XDEL")
        assert (b"XDEL", b"s", b"1-0", b"2-0") in write and (b"MULTI",) in write


# ---- "KEEPREF/DELREF/ACKED exposed as the delete policy"


async def test_keepref_deletes_the_entry_and_leaves_other_groups_references(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """What plain XDEL does on every server: another group's pending list keeps the ids of
    entries that are gone."""
    await fill(redis, "s", 2)
    await _other_group_holds(redis, 2)
    async with serving(_app(redis_server.url, "keepref")):
        await drained(redis)
    assert await _stream_ids(redis) == []
    assert await _pending_ids(redis, "other") == [b"1-0", b"2-0"]  # stale references
    assert await pending_count(redis, "s", "g") == 0


async def test_delref_deletes_the_entry_and_every_groups_reference_where_the_server_can(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 2)
    await _other_group_holds(redis, 2)
    app = _app(redis_server.url, "delref")
    if not await _has_xackdel(redis):
        with pytest.RaisesGroup(
            pytest.RaisesExc(
                UnsupportedError, match=rf"needs XACKDEL .*:{redis_server.port} has no XACKDEL"
            )
        ):
            async with serving(app):
                pass
        assert len(await _stream_ids(redis)) == 2  # nothing was read, nothing deleted
        return
    async with serving(app):
        await drained(redis)
    assert await _stream_ids(redis) == []
    assert await _pending_ids(redis, "other") == []  # no stale reference left


async def test_acked_deletes_only_what_every_group_has_acknowledged_where_the_server_can(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 3)
    await _other_group_holds(redis, 2, acked=1)  # 1 acked there, 2 pending there, 3 unread
    app = _app(redis_server.url, "acked")
    if not await _has_xackdel(redis):
        with pytest.RaisesGroup(pytest.RaisesExc(UnsupportedError, match="delete_policy='acked'")):
            async with serving(app):
                pass
        return
    async with serving(app):
        await drained(redis)
    assert await pending_count(redis, "s", "g") == 0  # acknowledged in this group, all three
    assert await _stream_ids(redis) == [b"2-0", b"3-0"]  # kept until 'other' is done
    assert await _pending_ids(redis, "other") == [b"2-0"]


async def test_a_refused_policy_names_the_subscription_the_server_and_the_way_out(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    if await _has_xackdel(redis):
        await redis.execute("PING")  # nothing to refuse: the policy is honoured (tests above)
        return
    with pytest.RaisesGroup(pytest.RaisesExc(UnsupportedError)) as refused:
        async with serving(_app(redis_server.url, "delref")):
            pass
    [error] = refused.value.exceptions
    message = str(error)
    assert message.startswith("subscription 'sub': delete_policy='delref' needs XACKDEL")
    assert f"127.0.0.1:{redis_server.port} has no XACKDEL" in message
    assert "use delete_policy='keepref'" in message


async def test_keepref_falls_back_to_xack_and_xdel_when_the_server_comes_back_without_xackdel(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """The table is read again after the server was lost: a build without XACKDEL is settled
    with XACK and XDEL, not with a command it would refuse."""
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    arrived = trio.Event()

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING, delete_on_ack=True), block=50)
    async def handle(n: int) -> None:
        seen.append(n)
        arrived.set()

    async with serving(app):
        await fill(redis, "s", 1)
        with trio.fail_after(10):
            await arrived.wait()
        await drained(redis)
        had_it = await _has_xackdel(redis)
        redis_server.stop()
        if had_it:  # the same address comes back as a build without XACKDEL
            redis_server.extra_args = (*redis_server.extra_args, "--rename-command", "XACKDEL", "")
        redis_server.start()
        arrived = trio.Event()
        await redis.execute("XADD", "s", "2-0", "_payload", "2")  # the group is gone: no save
        with trio.fail_after(20):
            await arrived.wait()
        await drained(redis)
    stats = await redis.execute("INFO", "commandstats")
    assert calls(stats, "xackdel") == 0 and calls(stats, "xdel") >= 1
    assert await redis.execute("XLEN", "s") == 0


# ---- validation: at construction, the same live and under app.test()


def test_a_delete_policy_is_keepref_delref_or_acked() -> None:
    assert RedisStream("s", delete_on_ack=True).delete_policy is DeletePolicy.KEEPREF
    assert RedisStream("s", delete_on_ack=True, delete_policy="DELREF").delete_policy is (
        DeletePolicy.DELREF
    )
    assert RedisStream("s").delete_policy is None
    with pytest.raises(ConfigurationError, match=r"'keepref', 'delref' or 'acked'.*'sometimes'"):
        RedisStream("s", delete_on_ack=True, delete_policy="sometimes")
    with pytest.raises(ConfigurationError, match="not 3"):
        RedisStream("s", delete_on_ack=True, delete_policy=3)  # type: ignore[arg-type]


def test_a_delete_policy_without_delete_on_ack_is_refused() -> None:
    with pytest.raises(ConfigurationError, match="give delete_on_ack=True too"):
        RedisStream("s", delete_policy="delref")


async def test_under_app_test_the_policy_is_validated_the_same_and_entries_are_handled() -> None:
    with pytest.raises(ConfigurationError, match="'keepref', 'delref' or 'acked'"):
        RedisStream("s", delete_on_ack=True, delete_policy="delete")
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))
    seen: list[int] = []

    @broker.subscriber(RedisStream("s", group="g", delete_on_ack=True, delete_policy="acked"))
    async def handle(n: int) -> None:
        seen.append(n)

    async with app.test() as t:
        await t.publish("s", 1)
    assert seen == [1]  # no server to ask: whether it has XACKDEL is checked when connecting


# ---- cluster: the settle goes to the stream's node, whichever command it is


@pytest.mark.parametrize("window", ["plain", "atomic"])
async def test_delete_on_ack_in_a_cluster_deletes_with_the_command_the_cluster_has(
    redis_cluster: RedisClusterServers, window: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    key, counter = f"{{dc-{window}}}:s", f"{{dc-{window}}}:n"
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))
    atomic = window == "atomic"

    @broker.subscriber(
        RedisStream(key, group="g", start=BEGINNING, delete_on_ack=True),
        pipeline=atomic,
        atomic=atomic,
    )
    async def handle(n: int, ctx: Context) -> None:
        if atomic:
            ctx.pipeline.incr(counter)

    async with connect(redis_cluster.url) as redis:
        await redis.execute("DEL", key)
        await redis.execute("DEL", counter)
        for n in (1, 2, 3):
            await redis.execute("XADD", key, f"{n}-0", "_payload", str(n))
        writes = Writes().install(monkeypatch)
        async with serving(app):
            await drained(redis, key)
        assert await redis.execute("XLEN", key) == 0
        if atomic:
            assert await redis.execute("GET", counter) == b"3"
        if (await redis.server_commands()).has("xackdel"):
            assert writes.with_command(b"XACKDEL") and not writes.with_command(b"XDEL")
        else:
            assert writes.with_command(b"XDEL") and not writes.with_command(b"XACKDEL")
