"""What the server can do is read from its own command table, never from a version string.

Each test holds the table to what the connected server really does (it calls the command or
the option and looks at the answer), so the same test is right on every server of the matrix.
"""

from __future__ import annotations

from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.client.capabilities import SNAPSHOT, parse_command_tokens
from trio_streams.redis.client.errors import ReplyError


async def _works(redis: RedisClient, *args: str) -> bool:
    """Whether the server knows ``args`` (an error other than 'unknown' still means it does)."""
    try:
        await redis.execute(*args)
    except ReplyError as exc:
        text = exc.message.lower()
        return not ("unknown command" in text or "syntax error" in text or "unknown sub" in text)
    return True


async def _succeeds(redis: RedisClient, *args: str) -> bool:
    """Whether the server runs ``args`` without an error (an option it lacks is an error)."""
    try:
        await redis.execute(*args)
    except ReplyError:
        return False
    return True


async def test_the_command_table_is_read_from_the_connected_server(
    redis: RedisClient, redis_server: RedisServer
) -> None:
    assert redis.commands is SNAPSHOT  # nothing read yet: the committed table stands in
    commands = await redis.server_commands()
    assert not commands.is_snapshot
    assert redis.commands is commands
    assert f"{redis_server.port}" in commands.source
    assert commands.has("XADD") and commands.has("xgroup|setid")
    assert not commands.has("no-such-command")
    spec = commands.keys("xadd")
    assert spec is not None and spec.first == 1
    assert await redis.server_commands() is commands  # kept, not read again


async def test_a_command_is_had_exactly_when_the_server_runs_it(redis: RedisClient) -> None:
    commands = await redis.server_commands()
    await redis.execute("XADD", "s", "1-1", "f", "v")
    await redis.execute("XGROUP", "CREATE", "s", "g", "0")
    for name, call in [
        ("xackdel", ("XACKDEL", "s", "g", "IDS", "1", "1-1")),
        ("hsetex", ("HSETEX", "h", "FIELDS", "1", "f", "v")),
        ("hgetdel", ("HGETDEL", "h", "FIELDS", "1", "f")),
        ("client|setinfo", ("CLIENT", "SETINFO", "LIB-NAME", "probe")),
        ("xautoclaim", ("XAUTOCLAIM", "s", "g", "c", "0", "0")),
    ]:
        assert commands.has(name) == await _works(redis, *call), name


async def test_an_option_is_taken_exactly_when_the_server_accepts_it(redis: RedisClient) -> None:
    commands = await redis.server_commands()
    assert commands.takes("xadd", "MAXLEN") and commands.takes("xtrim", "MINID")
    assert commands.takes("xgroup|setid", "ENTRIESREAD")
    assert not commands.takes("xadd", "NO-SUCH-OPTION")
    acked = await _succeeds(redis, "XADD", "s", "ACKED", "MAXLEN", "10", "*", "f", "v")
    assert commands.takes("xadd", "ACKED") == acked
    acked = await _succeeds(redis, "XTRIM", "s", "MAXLEN", "10", "ACKED")
    assert commands.takes("xtrim", "ACKED") == acked


def test_the_snapshot_knows_key_positions_but_no_option() -> None:
    assert SNAPSHOT.is_snapshot
    assert SNAPSHOT.has("xadd")
    assert not SNAPSHOT.takes("xadd", "MAXLEN")  # no docs read: no option is assumed


def test_command_docs_tokens_are_read_from_both_reply_shapes() -> None:
    resp3 = {
        b"xadd": {
            b"summary": b"...",
            b"arguments": [
                {b"name": b"key", b"type": b"key"},
                {
                    b"name": b"trim",
                    b"type": b"block",
                    b"arguments": [{b"name": b"acked", b"type": b"pure-token", b"token": b"ACKED"}],
                },
            ],
        },
        b"xgroup": {
            b"subcommands": {
                b"xgroup|setid": {
                    b"arguments": [{b"name": b"entriesread", b"token": b"ENTRIESREAD"}]
                }
            }
        },
    }
    resp2 = [
        b"xadd",
        [b"arguments", [[b"name", b"nomkstream", b"token", b"NOMKSTREAM"]]],
    ]
    assert parse_command_tokens(resp3) == {
        "xadd": frozenset({"ACKED"}),
        "xgroup": frozenset(),
        "xgroup|setid": frozenset({"ENTRIESREAD"}),
    }
    assert parse_command_tokens(resp2) == {"xadd": frozenset({"NOMKSTREAM"})}


async def test_the_table_is_read_again_when_the_client_reconnects_to_another_build(
    redis_server: RedisServer,
) -> None:
    async with connect(redis_server.url) as redis:
        assert (await redis.server_commands()).has("xautoclaim")
        redis_server.stop()
        # The same address comes back as a build without XAUTOCLAIM.
        redis_server.extra_args = (*redis_server.extra_args, "--rename-command", "XAUTOCLAIM", "")
        redis_server.start()
        assert await redis.execute("PING") in (b"PONG", "PONG")
        assert not redis.commands.has("xautoclaim")


async def test_a_cluster_reads_the_table_of_its_nodes(redis_cluster: object) -> None:
    url = redis_cluster.url  # type: ignore[attr-defined]
    async with connect(url) as redis:
        commands = await redis.server_commands()
        assert commands.has("xadd") and not commands.is_snapshot
        assert commands.takes("xgroup|setid", "ENTRIESREAD")
