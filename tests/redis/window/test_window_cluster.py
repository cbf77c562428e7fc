"""The window on a Redis Cluster: "In a cluster every key of a segment must hash to the
subscription key's slot; a command that breaks this is refused when it is queued (a clear error
naming the key), never half-applied. Commands whose keys cannot be known without the server are
refused under atomic." — live, and the same under ``app.test()``."""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisClusterServers
from tests.support import serving
from trio_streams import App, Context, Position
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient, connect, key_slot


def _keys() -> tuple[str, str, str]:
    """A stream, a key in its slot (one hash tag) and a key on another node."""
    tag = secrets.token_hex(4)
    stream, same = f"{{{tag}}}:orders", f"{{{tag}}}:total"
    other = f"elsewhere:{tag}"
    while key_slot(other) == key_slot(stream):
        other += "x"
    return stream, same, other


async def _drained(redis: RedisClient, stream: str) -> None:
    async def done() -> bool:
        groups = await redis.execute("XINFO", "GROUPS", stream)
        if not groups:
            return False
        group = groups[0]
        fields = (
            group if isinstance(group, dict) else dict(zip(group[::2], group[1::2], strict=True))
        )
        last = await redis.execute("XREVRANGE", stream, "+", "-", "COUNT", 1)
        return bool(fields[b"pending"] == 0 and fields[b"last-delivered-id"] == last[0][0])

    await eventually(done, within=20, what=f"{stream} drained")


def _app(url: str, stream: str, other: str, same: str) -> tuple[App, Callable[..., Any], list[str]]:
    app = App("svc")
    broker = app.broker(RedisBroker(url))
    errors: list[str] = []

    @broker.subscriber(
        RedisStream(stream, group="g", start=Position.beginning()),
        name="sub",
        pipeline=True,
        atomic=True,
        block=50,
    )
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr(same)  # the stream's hash tag: accepted
        for command in (("INCR", other), ("SORT", same)):
            try:
                ctx.pipeline.command(*command)
            except ConfigurationError as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    return app, handle, errors


async def test_a_key_of_another_slot_and_a_command_with_unknown_keys_are_refused_when_queued(
    redis_cluster: RedisClusterServers,
) -> None:
    stream, same, other = _keys()
    app, _, errors = _app(redis_cluster.url, stream, other, same)
    async with connect(redis_cluster.url) as redis:
        await redis.execute("XADD", stream, "1-0", "_payload", "1")
        async with serving(app):
            await _drained(redis, stream)
        assert await redis.execute("GET", same) == b"1"  # the segment ran, with its XACK
        assert await redis.execute("GET", other) is None  # never sent
    assert len(errors) == 2
    assert errors[0].startswith("SegmentRefused")
    assert repr(other) in errors[0] and repr(stream) in errors[0]
    assert "cannot be known without the server" in errors[1]


async def test_under_app_test_the_same_commands_are_refused() -> None:
    stream, same, other = _keys()
    app, handle, errors = _app("redis+cluster://127.0.0.1:1", stream, other, same)
    async with app.test() as t:
        await t.publish(stream, 1)
        assert t.handler(handle).segments == [[("INCR", same)]]
    assert len(errors) == 2
    assert repr(other) in errors[0]
    assert "cannot be known without the server" in errors[1]


async def test_without_atomic_a_segment_may_name_keys_on_any_node(
    redis_cluster: RedisClusterServers,
) -> None:
    stream, same, other = _keys()
    app = App("svc")
    broker = app.broker(RedisBroker(redis_cluster.url))

    @broker.subscriber(
        RedisStream(stream, group="g", start=Position.beginning()), pipeline=True, block=50
    )
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr(same)
        ctx.pipeline.incr(other)  # another node: the flush's pipeline is split per node

    async with connect(redis_cluster.url) as redis:
        for n in (1, 2, 3):
            await redis.execute("XADD", stream, f"{n}-0", "_payload", str(n))
        async with serving(app):
            await _drained(redis, stream)

            async def both_counted() -> bool:
                # The flush sends each node its part at once: the stream's node may answer
                # (and the entries leave the pending list) before the other node has.
                return bool(
                    await redis.execute("GET", same) == await redis.execute("GET", other) == b"3"
                )

            await eventually(both_counted, within=5, what="both keys incremented three times")
