"""The keys the client finds from a server's key specifications are the keys the server finds
(``COMMAND GETKEYS``), and the committed snapshot agrees with the server it runs against.

Both hold on every server of the matrix: the commands are asked of the connected server, and
a command it does not have is not asked.
"""

from __future__ import annotations

import dataclasses

import pytest

from trio_streams.redis.client import RedisClient
from trio_streams.redis.client.capabilities import SNAPSHOT
from trio_streams.redis.client.command_keys import format_line
from trio_streams.redis.client.errors import ReplyError
from trio_streams.redis.client.keys import KeySearch, KeySpec, search_keys

#: Commands whose keys move with their arguments, as a handler might queue them.
MOVABLE: list[tuple[str, ...]] = [
    ("GEORADIUS", "places", "15", "37", "200", "km", "STORE", "near"),
    ("GEORADIUS", "places", "15", "37", "200", "km", "WITHDIST", "STOREDIST", "d"),
    ("GEORADIUS", "places", "15", "37", "200", "km"),
    ("GEORADIUSBYMEMBER", "places", "palermo", "200", "km", "STORE", "near"),
    ("LMPOP", "2", "l1", "l2", "LEFT", "COUNT", "1"),
    ("BLMPOP", "0", "3", "l1", "l2", "l3", "RIGHT"),
    ("ZUNIONSTORE", "dest", "2", "z1", "z2", "WEIGHTS", "1", "2"),
    ("ZINTERCARD", "2", "z1", "z2", "LIMIT", "1"),
    ("SINTERCARD", "3", "a", "b", "c"),
    ("EVAL", "return 1", "2", "k1", "k2", "arg"),
    ("FCALL", "f", "1", "k1"),
    ("XREAD", "COUNT", "1", "STREAMS", "s1", "s2", "0", "0"),
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s1", ">"),
    ("MIGRATE", "h", "1", "", "0", "5", "KEYS", "a", "b"),
    ("SORT", "l", "BY", "w_*", "STORE", "dest"),
]


@pytest.mark.parametrize("command", MOVABLE, ids=lambda c: " ".join(c[:2]))
async def test_the_keys_read_from_the_servers_specs_are_the_keys_the_server_finds(
    redis: RedisClient, command: tuple[str, ...]
) -> None:
    commands = await redis.server_commands()
    assert commands.has(command[0])
    found = commands.finder.keys(command)
    expected = await _server_keys(redis, command)
    if expected is None:  # the server cannot tell either (an empty key, no keys)
        assert found is None or found == []
    elif found is None:
        # The specs cannot say (SORT, MIGRATE: flagged incomplete or unknown): refused when
        # queued in an atomic segment, asked of the server (COMMAND GETKEYS) in a cluster.
        assert command[0] in ("SORT", "MIGRATE")
    else:
        assert [k.encode() if isinstance(k, str) else k for k in found] == expected


async def _server_keys(redis: RedisClient, command: tuple[str, ...]) -> list[bytes] | None:
    try:
        return [bytes(k) for k in await redis.execute("COMMAND", "GETKEYS", *command)]
    except ReplyError:
        return None


def test_a_spec_the_server_marks_incomplete_or_unknown_says_nothing() -> None:
    index = KeySearch("index", "range", index=1)
    assert search_keys([index], ("GET", "k")) == ["k"]
    assert search_keys([index, KeySearch("unknown", "unknown")], ("SORT", "k")) is None
    incomplete = KeySearch("keyword", "range", keyword=b"KEYS", startfrom=-2, lastkey=-1)
    assert search_keys([incomplete], ("MIGRATE", "KEYS", "a")) == ["a"]
    flagged = dataclasses.replace(incomplete, incomplete=True)
    assert search_keys([flagged], ("MIGRATE", "KEYS", "a")) is None


def test_a_key_count_the_arguments_do_not_fit_says_nothing() -> None:
    keynum = KeySearch("index", "keynum", index=1, keynumidx=0, firstkey=1, keystep=1)
    assert search_keys([keynum], ("LMPOP", "2", "a", "b", "LEFT")) == ["a", "b"]
    assert search_keys([keynum], ("LMPOP", "5", "a")) is None  # more keys than arguments
    assert search_keys([keynum], ("LMPOP", "x", "a")) is None  # not a count
    assert search_keys([keynum], ("LMPOP", "0", "LEFT")) is None  # the server refuses it


def test_a_keyword_is_searched_from_where_the_spec_says() -> None:
    store = KeySearch("keyword", "range", keyword=b"STORE", startfrom=3, lastkey=0)
    assert search_keys([store], ("CMD", "k", "STORE", "x", "STORE", "dest")) == ["dest"]
    assert search_keys([store], ("CMD", "k", "a", "b", "c")) == []  # absent: no key
    backwards = KeySearch("keyword", "range", keyword=b"KEYS", startfrom=-2, lastkey=-1)
    assert search_keys([backwards], ("CMD", "KEYS", "a", "b")) == ["a", "b"]


async def test_the_snapshot_agrees_with_the_connected_server_on_every_command_it_has(
    redis: RedisClient,
) -> None:
    """The snapshot is the union of the matrix's tables (python -m
    tests.redis.client.command_snapshot): a server of the matrix has nothing it lacks, and
    nothing it says differently."""
    commands = await redis.server_commands()
    missing = [name for name in commands.names() if not SNAPSHOT.has(name)]
    differ = [
        name
        for name in commands.names()
        if SNAPSHOT.has(name)
        and format_line(name, _spec(SNAPSHOT.keys(name)))
        != format_line(name, _spec(commands.keys(name)))
    ]
    assert missing == [] and differ == [], (
        f"the snapshot lacks {missing} and differs on {differ}: regenerate it with "
        "python -m tests.redis.client.command_snapshot"
    )


def _spec(spec: KeySpec | None) -> KeySpec:
    assert spec is not None
    return spec
