"""A connection names the library (``CLIENT SETINFO``) where the server can hear it.

Whether the server has ``CLIENT SETINFO`` is read from its command table, so each test is
right on every server of the matrix: Redis 7.2+ and Valkey list the library, Redis 7.0 (no
``SETINFO``) connects all the same.
"""

from __future__ import annotations

import pytest

from tests.redis.window.support import calls
from tests.redis_servers import RedisServer, redis_server
from trio_streams import __version__
from trio_streams.redis.client import RedisClient, connect


def _fields(reply: object) -> dict[str, str]:
    text = reply.decode() if isinstance(reply, bytes) else str(reply)
    return dict(part.split("=", 1) for part in text.split() if "=" in part)


async def _expect_named(redis: RedisClient, info: object) -> None:
    fields = _fields(info)
    if (await redis.server_commands()).has("client|setinfo"):
        assert fields["lib-name"] == "trio-streams"
        assert fields["lib-ver"] == __version__
    else:
        assert "lib-name" not in fields  # the server lists no library: nothing to name


@pytest.mark.parametrize("protocol", [3, 2])
async def test_client_list_names_the_library_and_its_version_where_the_server_has_setinfo(
    redis_server: RedisServer, protocol: int
) -> None:
    async with connect(f"{redis_server.url}?protocol={protocol}") as redis:
        assert redis.protocol is None or redis.protocol == protocol
        info = await redis.execute("CLIENT", "INFO")
        assert redis.protocol == protocol
        await _expect_named(redis, info)
        listed = await redis.execute("CLIENT", "LIST")
        text = listed.decode() if isinstance(listed, bytes) else str(listed)
        if (await redis.server_commands()).has("client|setinfo"):
            assert f"lib-name=trio-streams lib-ver={__version__}" in text


async def test_naming_the_library_costs_no_round_trip_of_its_own(redis: RedisClient) -> None:
    """The two SETINFO commands travel in the handshake's one write: a connection is as
    quick to open on a server that ignores them as on one that has them."""
    await redis.execute("PING")
    stats = await redis.execute("INFO", "commandstats")
    if (await redis.server_commands()).has("client|setinfo"):
        assert calls(stats, "client|setinfo") == 2  # LIB-NAME and LIB-VER, one connection
    assert calls(stats, "hello") == 1


async def test_a_user_denied_client_setinfo_still_connects() -> None:
    rules = ("limited", "on", ">pw", "~*", "&*", "+@all", "-client")
    with redis_server("--user", *rules) as server:
        async with connect(f"redis://limited:pw@127.0.0.1:{server.port}") as redis:
            assert await redis.execute("PING") in (b"PONG", "PONG")
            assert await redis.execute("SET", "k", "v") in (b"OK", "OK")
