"""Reply shapers: the replies the transport reads have one shape on RESP3 and RESP2; the
protocol in use is exposed, and a fallback to RESP2 is logged once."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import pytest
import trio

from tests.redis_servers import RedisServer, redis_server
from trio_streams.redis.client import RedisClient, StreamEntry, connect, shapes
from trio_streams.redis.client.shapes import PendingEntry, PendingSummary

Shaper = Callable[[Any], Any]


def without_clock(value: Any) -> Any:
    """The shaped value with every field that reads the server's clock set to 0."""
    if isinstance(value, PendingEntry):
        return value._replace(idle_ms=0)
    if isinstance(value, dict):
        timed = {"idle", "inactive", "seen-time", "active-time"}
        return {
            k: 0 if k in timed else without_clock(v)
            for k, v in value.items()
            if not (k == "pending" and isinstance(v, list))  # per-entry delivery times
        }
    if isinstance(value, list):
        return [without_clock(v) for v in value]
    return value


async def prepare(client: RedisClient) -> None:
    """The same data, with the same IDs, whatever the protocol."""
    await client.execute("FLUSHALL")
    for n in (1, 2, 3, 4):
        await client.execute("XADD", "s", f"{n}-1", "_payload", f"p{n}", "h:n", n)
    await client.execute("XGROUP", "CREATE", "s", "g", "0")
    await client.execute("HSET", "h", "f", "1", "g", "2")
    await client.execute("ZADD", "z", 1.5, "a", 2, "b", 3, "c", "+inf", "top", 4, "d")
    await client.execute("RPUSH", "l", "x", "y", "z")


#: (command, shaper), run in order on freshly prepared data.
STEPS: list[tuple[tuple[Any, ...], Shaper]] = [
    (("XREADGROUP", "GROUP", "g", "c", "COUNT", 2, "STREAMS", "s", ">"), shapes.stream_read),
    (("XREADGROUP", "GROUP", "g", "c2", "COUNT", 9, "STREAMS", "s", ">"), shapes.stream_read),
    (("XREADGROUP", "GROUP", "g", "c2", "COUNT", 9, "STREAMS", "s", ">"), shapes.stream_read),
    (("XREAD", "COUNT", 2, "STREAMS", "s", "h:missing", "0", "0"), shapes.stream_read),
    (("XREAD", "BLOCK", 1, "STREAMS", "s", "$"), shapes.stream_read),
    (("XRANGE", "s", "-", "+", "COUNT", 3), shapes.stream_entries),
    (("XPENDING", "s", "g"), shapes.pending_summary),
    (("XPENDING", "s", "g", "-", "+", 10), shapes.pending_entries),
    (("XDEL", "s", "2-1"), lambda r: r),
    (("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0"), shapes.stream_read),
    (("XCLAIM", "s", "g", "c3", 0, "1-1"), shapes.stream_entries),
    (("XAUTOCLAIM", "s", "g", "c3", 0, "0-0", "COUNT", 10), shapes.autoclaim),
    (("XAUTOCLAIM", "s", "g", "c", 0, "0-0", "JUSTID"), shapes.autoclaim_ids),
    (("XINFO", "STREAM", "s"), shapes.stream_info),
    (("XINFO", "STREAM", "s", "FULL"), shapes.stream_info),
    (("XINFO", "GROUPS", "s"), shapes.group_info),
    (("XINFO", "CONSUMERS", "s", "g"), shapes.consumer_info),
    (("HGETALL", "h"), shapes.hash_fields),
    (("HGETALL", "missing"), shapes.hash_fields),
    (("ZSCORE", "z", "a"), shapes.score),
    (("ZSCORE", "z", "top"), shapes.score),
    (("ZSCORE", "z", "missing"), shapes.score),
    (("ZRANGE", "z", 0, -1, "WITHSCORES"), shapes.scored_members),
    (("ZRANGE", "z", 0, 0, "WITHSCORES"), shapes.scored_members),
    (("ZRANGEBYSCORE", "z", 2, "+inf", "WITHSCORES", "LIMIT", 0, 2), shapes.scored_members),
    (("ZPOPMIN", "z"), shapes.scored_members),
    (("ZPOPMIN", "z", 1), shapes.scored_members),
    (("ZPOPMIN", "z", 2), shapes.scored_members),
    (("ZPOPMIN", "missing"), shapes.scored_members),
    (("LMPOP", 1, "l", "LEFT", "COUNT", 2), shapes.list_pop),
    (("LMPOP", 2, "missing", "l", "RIGHT"), shapes.list_pop),
    (("BLMPOP", 0.01, 1, "missing", "LEFT"), shapes.list_pop),
]


async def run_steps(url: str, protocol: int) -> tuple[list[Any], list[Any]]:
    async with connect(url, protocol=protocol) as client:
        await prepare(client)
        raw, shaped = [], []
        for command, shaper in STEPS:
            reply = await client.execute(*command)
            raw.append(reply)
            shaped.append(without_clock(shaper(reply)))
        assert client.protocol == protocol
        return raw, shaped


async def test_transport_replies_have_one_shape_on_resp3_and_resp2(
    redis_server: RedisServer,
) -> None:
    raw3, shaped3 = await run_steps(redis_server.url, 3)
    raw2, shaped2 = await run_steps(redis_server.url, 2)
    for (command, _), resp3, resp2 in zip(STEPS, shaped3, shaped2, strict=True):
        assert resp3 == resp2, command
    differing = {STEPS[i][0][0] for i, (a, b) in enumerate(zip(raw3, raw2, strict=True)) if a != b}
    assert {"XREADGROUP", "XINFO", "HGETALL", "ZSCORE", "ZRANGE", "ZPOPMIN"} <= differing

    # And the one shape is the documented one.
    by_command = dict(zip((" ".join(map(str, c)) for c, _ in STEPS), shaped3, strict=True))
    first_read = by_command["XREADGROUP GROUP g c COUNT 2 STREAMS s >"]
    assert first_read == {
        b"s": [
            StreamEntry(b"1-1", {b"_payload": b"p1", b"h:n": b"1"}),
            StreamEntry(b"2-1", {b"_payload": b"p2", b"h:n": b"2"}),
        ]
    }
    assert by_command["XREADGROUP GROUP g c2 COUNT 9 STREAMS s >"] == {}  # nothing new
    assert by_command["XREAD BLOCK 1 STREAMS s $"] == {}  # timed out
    history = by_command["XREADGROUP GROUP g c STREAMS s 0"][b"s"]
    assert history[1] == StreamEntry(b"2-1", None)  # deleted while pending
    assert by_command["XPENDING s g"] == PendingSummary(4, b"1-1", b"4-1", {b"c": 2, b"c2": 2})
    claimed = by_command["XAUTOCLAIM s g c3 0 0-0 COUNT 10"]
    assert claimed.deleted == [b"2-1"]
    assert [e.id for e in claimed.entries] == [b"1-1", b"3-1", b"4-1"]
    info = by_command["XINFO STREAM s"]
    assert info["length"] == 3
    assert info["first-entry"] == StreamEntry(b"1-1", {b"_payload": b"p1", b"h:n": b"1"})
    full = by_command["XINFO STREAM s FULL"]
    assert full["groups"][0]["name"] == b"g"
    assert {c["name"] for c in full["groups"][0]["consumers"]} == {b"c", b"c2", b"c3"}
    assert by_command["HGETALL h"] == {b"f": b"1", b"g": b"2"}
    assert by_command["HGETALL missing"] == {}
    assert by_command["ZSCORE z a"] == 1.5
    assert by_command["ZSCORE z top"] == float("inf")
    assert by_command["ZSCORE z missing"] is None
    assert by_command["ZRANGE z 0 0 WITHSCORES"] == [(b"a", 1.5)]
    assert by_command["ZPOPMIN z"] == [(b"a", 1.5)]
    assert by_command["ZPOPMIN z 2"] == [(b"c", 3.0), (b"d", 4.0)]
    assert by_command["LMPOP 1 l LEFT COUNT 2"] == (b"l", [b"x", b"y"])
    assert by_command["LMPOP 2 missing l RIGHT"] == (b"l", [b"z"])
    assert by_command["BLMPOP 0.01 1 missing LEFT"] is None


async def test_fallback_to_resp2_is_logged_once_and_the_protocol_is_exposed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A server without HELLO: the client asks for RESP3 and falls back.
    with redis_server("--rename-command", "HELLO", "") as server:
        caplog.set_level(logging.WARNING, logger="trio_streams.redis.client")
        async with connect(server.url, pool_size=4) as client:
            before = client.protocol
            assert before is None  # nothing opened yet
            async with trio.open_nursery() as nursery:  # several connections at once
                for _ in range(4):
                    nursery.start_soon(client.execute, "BLPOP", "nothing", 0.05)
            async with client.dedicated_connection() as connection:
                assert connection.protocol == 2
            async with client.subscribe(["news"]) as subscription:
                assert subscription.connection is not None
            assert client.protocol == 2
        warnings = [r for r in caplog.records if r.name == "trio_streams.redis.client"]
        assert len(warnings) == 1
        assert warnings[0].levelno == logging.WARNING
        assert f"redis 127.0.0.1:{server.port} does not speak RESP3" in warnings[0].getMessage()

    caplog.clear()
    with redis_server() as server:
        async with connect(server.url) as client:
            await client.execute("PING")
            assert client.protocol == 3
        assert not [r for r in caplog.records if r.name == "trio_streams.redis.client"]
