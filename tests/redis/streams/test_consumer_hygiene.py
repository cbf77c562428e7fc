"""The hygiene rule means the same on every server: a consumer is removed when it holds
nothing, has not read or claimed an entry for ``remove_idle_consumers`` seconds, and no live
process holds its name.

Redis 7.0's ``XINFO CONSUMERS`` ``idle`` moves only when entries are taken; Redis 7.2+ and
Valkey reset ``idle`` on every read, even an empty one, and report ``inactive`` for what 7.0's
``idle`` meant. The first test checks that on the connected server; the others hold the rule on
it, whichever it is.
"""

from __future__ import annotations

from typing import Any

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App
from trio_streams.redis import RedisBroker, RedisStream
from trio_streams.redis.client import RedisClient
from trio_streams.redis.group_hygiene import _REMOVE_QUIET
from trio_streams.redis.names import lease_key
from trio_streams.redis.wire import parse_consumers, quiet_ms


async def _fields(redis: RedisClient, name: str) -> dict[str, Any]:
    for consumer in await redis.execute("XINFO", "CONSUMERS", "s", "g"):
        info = (
            consumer
            if isinstance(consumer, dict)
            else dict(zip(consumer[::2], consumer[1::2], strict=True))
        )
        fields = {(k.decode() if isinstance(k, bytes) else k): v for k, v in info.items()}
        if fields["name"] == name.encode():
            return fields
    raise AssertionError(f"no consumer {name!r}")


async def _names(redis: RedisClient) -> set[str]:
    return {
        name for name, _, _ in parse_consumers(await redis.execute("XINFO", "CONSUMERS", "s", "g"))
    }


async def _took_one_and_went_quiet(redis: RedisClient, name: str, ms: int) -> None:
    """``name`` reads one entry of ``s`` and acknowledges it, then takes nothing for ``ms``."""
    await redis.execute("XADD", "s", "*", "f", "v")
    reply = await redis.execute("XREADGROUP", "GROUP", "g", name, "COUNT", 1, "STREAMS", "s", ">")
    [(_, [(entry_id, _)])] = reply.items() if isinstance(reply, dict) else reply
    await redis.execute("XACK", "s", "g", entry_id)

    async def quiet() -> bool:
        return quiet_ms(await _fields(redis, name)) >= ms

    await eventually(quiet, within=10, what=f"{name} quiet for {ms} ms")


async def test_an_empty_read_does_not_make_a_consumer_less_quiet_on_any_server(
    redis: RedisClient,
) -> None:
    """The claim the rule rests on, checked on the connected server: ``quiet_ms`` (``inactive``,
    else ``idle``) goes on growing across a read that returns nothing; where the server has
    ``inactive``, its ``idle`` is the one that was reset."""
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await _took_one_and_went_quiet(redis, "c", 300)
    await redis.execute("XREADGROUP", "GROUP", "g", "c", "BLOCK", 10, "STREAMS", "s", ">")
    fields = await _fields(redis, "c")
    assert quiet_ms(fields) >= 300
    if "inactive" in fields:
        assert fields["idle"] < 300 <= fields["inactive"]  # idle was reset by the empty read
    else:
        assert fields["idle"] >= 300  # Redis 7.0: idle is what inactive is elsewhere


async def _remove(redis: RedisClient, name: str, ms: int) -> int:
    lease = lease_key("s", "g", name)
    return int(await redis.execute("EVAL", _REMOVE_QUIET, 2, "s", lease, "g", name, ms))


async def test_the_removal_checks_again_in_one_step_what_the_pass_saw(redis: RedisClient) -> None:
    """Pending entries, a live name or a recent entry taken between the pass's look and the
    removal keep the consumer: its pending entries are never dropped with it."""
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await _took_one_and_went_quiet(redis, "quiet", 200)
    await redis.execute("XADD", "s", "*", "f", "v")
    await redis.execute("XREADGROUP", "GROUP", "g", "holds", "STREAMS", "s", ">")
    await redis.execute("SET", lease_key("s", "g", "leased"), "token", "PX", 60_000)
    await redis.execute("XGROUP", "CREATECONSUMER", "s", "g", "leased")
    assert await _remove(redis, "holds", 0) == 0  # it holds an entry
    assert await _remove(redis, "leased", 0) == 0  # a live process holds its name
    assert await _remove(redis, "quiet", 60_000) == 0  # not quiet long enough
    assert await _remove(redis, "quiet", 200) == 1
    assert await _names(redis) == {"holds", "leased"}


async def test_a_consumer_that_never_took_an_entry_counts_from_its_creation_or_last_read(
    redis: RedisClient,
) -> None:
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await redis.execute("XGROUP", "CREATECONSUMER", "s", "g", "never")

    async def quiet() -> bool:
        return quiet_ms(await _fields(redis, "never")) >= 200

    await eventually(quiet, within=10, what="a consumer that never read gone quiet")
    assert await _remove(redis, "never", 200) == 1


async def test_a_live_consumer_of_a_quiet_stream_is_kept_and_a_dead_one_removed(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    """'live': took an entry, then nothing for longer than the limit (a quiet stream), and its
    process holds its name. 'gone': went quiet after it, with no lease. A pass that removes
    'gone' saw 'live' at least as quiet, and kept it, on every server."""
    await redis.execute("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    await redis.execute("SET", lease_key("s", "g", "live"), "token", "PX", 60_000)
    await _took_one_and_went_quiet(redis, "live", 0)
    await _took_one_and_went_quiet(redis, "gone", 0)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(
        RedisStream("s", group="g", consumer="me", remove_idle_consumers=1), block=20
    )
    async def handle(n: int) -> None: ...

    async with serving(app):

        async def gone_removed() -> bool:
            return "gone" not in await _names(redis)

        await eventually(gone_removed, within=10, what="the dead consumer removed")
        assert quiet_ms(await _fields(redis, "live")) >= 1000
    assert await _names(redis) == {"me", "live"}
