"""A segment's commands are checked against the connected server's own command table.

Which commands a server has is read from it, so each test is right on every server of the
matrix: ``HSETEX`` and the ``HEXPIRE`` family run in an atomic segment on Redis 8.2 and Valkey
9.1 and are refused when queued, naming the server, on Redis 7.0 and Valkey 8.0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from tests.redis.window.test_window import drained, fill
from tests.redis_servers import RedisClusterServers, RedisServer
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.redis import RedisBroker, RedisStream, SegmentRefused
from trio_streams.redis.client import RedisClient, connect

BEGINNING = Position.beginning()


def _app(
    url: str,
    commands: Sequence[tuple[str, ...]],
    *,
    atomic: bool = True,
    key: str = "s",
    ran: str = "ran",
) -> tuple[App, Any, list[str]]:
    """An app whose one handler queues ``commands``, then ``INCR ran``; returns it, the
    handler and the refusals it met."""
    app = App("svc")
    broker = app.broker(RedisBroker(url))
    refused: list[str] = []

    @broker.subscriber(
        RedisStream(key, group="g", start=BEGINNING), pipeline=True, atomic=atomic, name="sub"
    )
    async def handle(n: int, ctx: Context) -> None:
        for command in commands:
            try:
                ctx.pipeline.command(*command)
            except SegmentRefused as exc:
                refused.append(str(exc))
        ctx.pipeline.incr(ran)

    return app, handle, refused


# ---- "Learn key positions from the connected server's COMMAND INFO"


async def test_atomic_takes_a_command_newer_than_redis_7_0_where_the_server_has_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    commands = [
        ("HSETEX", "h", "EX", "100", "FIELDS", "1", "f", "v"),
        ("HEXPIRE", "h2", "100", "FIELDS", "1", "f"),
    ]
    app, _, refused = _app(redis_server.url, commands)
    async with serving(app):
        await drained(redis)
    assert await redis.execute("GET", "ran") == b"1"
    if (await redis.server_commands()).has("hsetex"):
        assert refused == []
        assert await redis.execute("HGET", "h", "f") == b"v"
        assert (await redis.execute("HTTL", "h", "FIELDS", 1, "f"))[0] > 0
    else:
        # ---- "A command the connected server does not have: refuse at the queue call naming
        # the server"
        assert len(refused) == 2
        assert refused[0].startswith(f"sub: redis 127.0.0.1:{redis_server.port} has no command")
        assert "HSETEX" in refused[0] and "HEXPIRE" in refused[1]
        assert await redis.execute("EXISTS", "h") == 0


async def test_a_command_the_server_does_not_have_is_refused_when_queued_without_atomic_too(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    app, _, refused = _app(redis_server.url, [("NOSUCHCOMMAND", "k")], atomic=False)
    async with serving(app):
        await drained(redis)
    assert refused == [
        f"sub: redis 127.0.0.1:{redis_server.port} has no command NOSUCHCOMMAND: it would "
        "fail inside the flush that carries other deliveries' acknowledgements; use a command "
        "this server has"
    ]
    assert await redis.execute("GET", "ran") == b"1"  # the rest of the segment went


async def test_movable_keys_are_read_from_the_servers_key_specifications(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """GEORADIUS ... STORE: no rule of the client knows it, the server's specs do."""
    await fill(redis, "s", 1)
    await redis.execute("GEOADD", "places", "13.36", "38.11", "palermo")
    commands = [
        ("GEORADIUS", "places", "15", "37", "200", "km", "STORE", "near"),
        ("LMPOP", "2", "l1", "l2", "LEFT"),
    ]
    app, _, refused = _app(redis_server.url, commands)
    async with serving(app):
        await drained(redis)
    assert refused == []
    assert await redis.execute("ZCARD", "near") == 1


async def test_a_command_the_specs_cannot_describe_is_refused_with_the_reason(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    commands = [("SORT", "l", "STORE", "dest"), ("MIGRATE", "h", "1", "", "0", "5", "KEYS", "a")]
    app, _, refused = _app(redis_server.url, commands)
    async with serving(app):
        await drained(redis)
    assert len(refused) == 2
    for name, reason in zip(("SORT", "MIGRATE"), refused, strict=True):
        assert f"the keys of {name} cannot be known without the server" in reason
        assert f"redis 127.0.0.1:{redis_server.port}'s key specifications of {name}" in reason
        assert "COMMAND GETKEYS cannot be asked while a handler queues" in reason


async def test_the_table_read_again_after_a_reconnect_is_the_one_segments_are_checked_by(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    app, _, refused = _app(redis_server.url, [("HINCRBYFLOAT", "h", "f", "1.5")])
    async with serving(app):
        await drained(redis)
        assert refused == []
        redis_server.stop()
        # The same address comes back as a build without HINCRBYFLOAT.
        redis_server.extra_args = (*redis_server.extra_args, "--rename-command", "HINCRBYFLOAT", "")
        redis_server.start()
        await fill(redis, "s", 1)  # a fresh server (nothing saved): the group comes back
        await drained(redis)
    assert len(refused) == 1 and "has no command HINCRBYFLOAT" in refused[0]


# ---- "the snapshot as the fallback, under app.test() too"


async def test_under_app_test_the_snapshot_knows_the_newer_commands_of_the_tested_servers() -> None:
    commands = [
        ("HSETEX", "h", "FIELDS", "1", "f", "v"),
        ("XACKDEL", "s2", "g", "IDS", "1", "1-0"),
        ("NOSUCHCOMMAND", "k"),
    ]
    app, handle, refused = _app("redis://127.0.0.1:1", commands)
    async with app.test() as t:
        await t.publish("s", 1)
        assert t.handler(handle).segments == [[*commands[:2], ("INCR", "ran")]]
    assert refused == [
        "sub: the keys of NOSUCHCOMMAND cannot be known without the server (NOSUCHCOMMAND "
        "is not in the committed snapshot of commands), and with atomic=True every key of a "
        "segment must be known when it is queued (in a cluster, to check it shares the "
        "stream's slot): use a command whose keys are known, or a subscription without "
        "atomic=True"
    ]


# ---- cluster: the keys a server's specs find are held to the stream's slot


async def test_in_a_cluster_keys_found_by_the_specs_must_share_the_streams_slot(
    redis_cluster: RedisClusterServers,
) -> None:
    stream = "{ks}:s"
    commands = [
        ("GEORADIUS", "{ks}:places", "15", "37", "200", "km", "STORE", "{ks}:near"),
        ("GEORADIUS", "{ks}:places", "15", "37", "200", "km", "STORE", "elsewhere"),
    ]
    app, _, refused = _app(redis_cluster.url, commands, key=stream, ran="{ks}:ran")
    async with connect(redis_cluster.url) as redis:
        await redis.execute("DEL", "{ks}:near")
        await redis.execute("DEL", "elsewhere")
        await redis.execute("GEOADD", "{ks}:places", "13.36", "38.11", "palermo")
        await redis.execute("XADD", stream, "1-0", "_payload", "1")
        async with serving(app):
            await drained(redis, stream)
        assert await redis.execute("ZCARD", "{ks}:near") == 1
        assert await redis.execute("EXISTS", "elsewhere") == 0
    assert len(refused) == 1
    assert "names key 'elsewhere'" in refused[0]


@pytest.mark.parametrize("name", ["HSETEX", "XACKDEL", "HGETDEL"])
def test_the_snapshot_says_where_the_keys_of_newer_commands_are(name: str) -> None:
    from trio_streams.redis.client.capabilities import SNAPSHOT

    spec = SNAPSHOT.keys(name)
    assert spec is not None and (spec.first, spec.last, spec.step) == (1, 1, 1)
