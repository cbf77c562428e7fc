"""The pipeline window against a real ``redis-server``: one test per sentence of its contract.

A handler queues commands on ``ctx.pipeline``; the window sends the kept ones with the read's
acknowledgement. What reached the server is read back from it (keys, the pending list,
``INFO commandstats``); what the client wrote is counted at its socket (:mod:`.support`).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis.streams.support import entries, pending_count
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from tests.support import serving
from trio_streams import (
    App,
    Context,
    Outcome,
    Pipeline,
    Position,
    SegmentClosed,
    ack,
    drop,
    retry,
    retry_after,
)
from trio_streams.core.errors import ConfigurationError, UnsupportedError
from trio_streams.redis import RedisBroker, RedisStream, SegmentRefused
from trio_streams.redis.client import RedisClient, connect

from .support import Writes, calls, one_left_outstanding, stat

BEGINNING = Position.beginning()


async def fill(redis: RedisClient, key: str, count: int) -> None:
    pipeline = redis.pipeline()
    for n in range(1, count + 1):
        pipeline.add("XADD", key, f"{n}-0", "_payload", str(n))
    (await pipeline.execute()).raise_first()


async def drained(redis: RedisClient, key: str = "s", group: str = "g") -> None:
    """Every entry of ``key`` was delivered to ``group`` and acknowledged."""

    async def done() -> bool:
        last = _fields(await redis.execute("XINFO", "STREAM", key))[b"last-generated-id"]
        for info in await redis.execute("XINFO", "GROUPS", key):
            fields = _fields(info)
            if fields[b"name"] == group.encode():
                return bool(fields[b"last-delivered-id"] == last and fields[b"pending"] == 0)
        return False

    await eventually(done, within=10, what=f"every entry of {key!r} acknowledged")


def _fields(reply: Any) -> dict[bytes, Any]:
    if isinstance(reply, dict):
        return reply
    return dict(zip(reply[::2], reply[1::2], strict=True))


async def values(redis: RedisClient, keys: list[str]) -> list[bytes | None]:
    return [await redis.execute("GET", key) for key in keys]


# ---- "pipeline=True at the mount point opens a window ... Each delivery of one read takes a
# slot in it."


async def test_pipeline_true_opens_a_window_and_each_delivery_of_a_read_takes_a_slot(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    done = trio.Event()
    segments: list[Pipeline] = []

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        segments.append(ctx.pipeline)
        ctx.pipeline.incr(f"n:{n}")
        if len(segments) == 3:
            done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
        await drained(redis)
    assert len({id(segment) for segment in segments}) == 3  # a segment per delivery
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", b"1", b"1"]


# ---- "Commands a handler queues through ctx.pipeline go into its slot's segment ... The
# handler never sees their replies."


async def test_queued_commands_are_not_sent_while_the_handler_runs_and_return_no_reply(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen_inside: list[object] = []
    done = trio.Event()

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), pipeline=True)
    async def handle(n: int, pipeline: Pipeline) -> None:
        seen_inside.append(pipeline.set("k", "v"))  # queued: returns nothing
        seen_inside.append(await redis.execute("GET", "k"))  # and nothing reached the server
        done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
        await drained(redis)
    assert seen_inside == [None, None]
    assert await redis.execute("GET", "k") == b"v"


# ---- "The outcome decides the segment: ack keeps it; drop, retry and retry_after discard it.
# Every outcome sends the same settle it sends without a window."


async def test_ack_keeps_the_segment_and_drop_retry_retry_after_discard_it_with_their_usual_settle(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 4)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    outcomes: dict[int, Outcome] = {1: ack(), 2: drop(), 3: retry(), 4: retry_after(3600)}
    handled: list[tuple[int, int]] = []

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), pipeline=True, max_attempts=5)
    async def handle(n: int, ctx: Context) -> Outcome:
        handled.append((n, ctx.attempt))
        ctx.pipeline.incr(f"n:{n}:{ctx.attempt}")
        return outcomes[n] if ctx.attempt == 1 else ack()

    async with serving(app):

        async def copies_done() -> bool:
            await trio.lowlevel.checkpoint()
            return (3, 2) in handled

        await eventually(copies_done, what="the retry copy handled")
        await drained(redis)
    assert await values(redis, ["n:1:1", "n:2:1", "n:3:1", "n:4:1", "n:3:2"]) == [
        b"1",
        None,
        None,
        None,
        b"1",  # the retry copy's own segment, kept by its ack
    ]
    stream = await entries(redis, "s")
    copies = [fields for _, fields in stream if "h:x-ruststream-retry-count" in fields]
    assert [c["_payload"] for c in copies] == [b"3"]  # retry: a copy, XADDed with the ack
    assert await redis.execute("ZCARD", "{s}:delayed") == 1  # retry_after: durable


# ---- "A delivery that ends without being settled (abandoned at shutdown, purged) sends no
# settle: its segment is discarded and its entry stays pending, to be delivered again."


async def test_a_delivery_abandoned_at_shutdown_sends_nothing_and_is_delivered_again(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    source = RedisStream("s", group="g", consumer="c1", start=BEGINNING)
    first = App("svc", shutdown_timeout=0.2)
    broker = first.broker(RedisBroker(redis_server.url))
    started = trio.Event()

    @broker.subscriber(source, pipeline=True)
    async def stuck(n: int, ctx: Context) -> None:
        ctx.pipeline.set("side-effect", "applied")
        started.set()
        await trio.sleep_forever()  # cancelled when the drain times out: never settled

    async with serving(first):
        with trio.fail_after(10):
            await started.wait()
    assert await redis.execute("GET", "side-effect") is None
    assert await pending_count(redis, "s", "g") == 1  # no XACK: still pending

    second = App("svc")
    again = second.broker(RedisBroker(redis_server.url))
    attempts: list[int] = []
    done = trio.Event()

    @again.subscriber(source, pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.set("side-effect", f"applied on attempt {ctx.attempt}")
        attempts.append(ctx.attempt)
        done.set()

    async with serving(second):
        with trio.fail_after(10):
            await done.wait()
        await drained(redis)
    assert attempts == [2]
    assert await redis.execute("GET", "side-effect") == b"applied on attempt 2"


# ---- "The window flushes when the number of settled deliveries reaches the read's COUNT,
# when no unsettled delivery remains, or when the subscription stops."


async def test_nothing_is_flushed_until_the_settled_deliveries_reach_the_reads_count(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    release = trio.Event()
    two_settled = trio.Event()
    settled = 0

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING), pipeline=True, count=3, workers=3
    )
    async def handle(n: int, ctx: Context) -> None:
        nonlocal settled
        ctx.pipeline.incr(f"n:{n}")
        if n == 3:
            await release.wait()
        settled += 1
        if settled == 2:
            two_settled.set()

    await redis.execute("CONFIG", "RESETSTAT")
    async with serving(app) as running:
        with trio.fail_after(10):
            await two_settled.wait()
        # Wait until both settles are over: a flush they started would be answered by then.
        await eventually(one_left_outstanding(running), what="the first two deliveries settled")
        assert calls(await redis.execute("INFO", "commandstats"), "xack") == 0
        assert await values(redis, ["n:1", "n:2", "n:3"]) == [None, None, None]
        release.set()
        await drained(redis)
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", b"1", b"1"]
    assert calls(await redis.execute("INFO", "commandstats"), "xack") == 1


async def test_a_read_smaller_than_count_flushes_when_no_unsettled_delivery_remains(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 2)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), pipeline=True, count=100)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr(f"n:{n}")

    async with serving(app):
        await drained(redis)  # 2 of COUNT 100: flushed once nothing was left unsettled
        assert await values(redis, ["n:1", "n:2"]) == [b"1", b"1"]


async def test_the_window_flushes_what_was_settled_when_the_subscription_stops(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 2)
    app = App("svc", shutdown_timeout=0.2)
    broker = app.broker(RedisBroker(redis_server.url))
    first_done = trio.Event()

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING), pipeline=True, count=2, workers=2
    )
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr(f"n:{n}")
        if n == 2:
            await trio.sleep_forever()  # never settled
        first_done.set()

    async with serving(app):
        with trio.fail_after(10):
            await first_done.wait()
        assert await redis.execute("GET", "n:1") is None  # the read is not complete
    # Stopped: entry 1's segment and XACK were flushed; entry 2 stays pending, unapplied.
    assert await values(redis, ["n:1", "n:2"]) == [b"1", None]
    pending = await redis.execute("XPENDING", "s", "g", "-", "+", 10)
    assert [p[0] for p in pending] == [b"2-0"]


# ---- "A flush sends the kept segments in the order they were committed, then the read's
# settles, in one pipeline over a pooled connection ... one round trip to the server per read."


async def test_the_contracts_example_flushes_incr_incr_xack_in_one_exchange(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, "s", 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    order = iter((1, 2, 3))
    turn = [trio.Event() for _ in range(4)]
    turn[1].set()

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING), pipeline=True, count=3, workers=3
    )
    async def handle(n: int, ctx: Context) -> Outcome:
        await turn[n].wait()  # settle in entry order, whatever the workers' schedule
        ctx.pipeline.incr(f"n:{n}")
        turn[min(n + 1, 3)].set()
        return drop() if n == 2 else ack()

    del order
    writes = Writes().install(monkeypatch)
    async with serving(app):
        await drained(redis)
    flushes = writes.with_command(b"XACK")
    assert flushes == [
        [(b"INCR", b"n:1"), (b"INCR", b"n:3"), (b"XACK", b"s", b"g", b"1-0", b"2-0", b"3-0")]
    ]
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", None, b"1"]


async def test_under_load_one_pipeline_write_per_read_counted_at_the_socket_and_the_server(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, "s", 1000)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), pipeline=True, count=100)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr("total")

    await redis.execute("CONFIG", "RESETSTAT")
    writes = Writes().install(monkeypatch)
    async with serving(app):
        await drained(redis)
    monkeypatch.undo()
    info = await redis.execute("INFO", "commandstats")
    assert await redis.execute("GET", "total") == b"1000"
    flushes = writes.with_command(b"XACK")
    # Ten reads of 100: ten writes, each 100 INCRs then one XACK of the read's 100 ids.
    assert len(flushes) == 10
    for flush in flushes:
        assert [c[0] for c in flush] == [b"INCR"] * 100 + [b"XACK"]
        assert len(flush[-1]) == 3 + 100
    # The server saw the same: ten XACKs, a thousand INCRs, and one read event per write.
    assert (calls(info, "xack"), calls(info, "incr")) == (10, 1000)
    # Each read event of the server is a client write, a connection's handshake or its close
    # (the handshakes are written before the counting wrapper sees a connection).
    stats = await redis.execute("INFO", "stats")
    reads = stat(stats, "total_reads_processed")
    connections = stat(stats, "total_connections_received")
    assert len(flushes) + 10 <= reads <= len(writes.writes) + 2 * connections + 3


# ---- "atomic=True wraps each segment in MULTI/EXEC with the delivery's own settle inside it
# ... a command that fails inside EXEC leaves the others applied."


async def test_atomic_wraps_each_segment_in_multi_exec_with_its_own_xack(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, "s", 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    turn = [trio.Event() for _ in range(4)]
    turn[1].set()

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING),
        pipeline=True,
        atomic=True,
        count=3,
        workers=3,
    )
    async def handle(n: int, ctx: Context) -> Outcome:
        await turn[n].wait()
        ctx.pipeline.incr(f"n:{n}")
        turn[min(n + 1, 3)].set()
        return drop() if n == 2 else ack()

    writes = Writes().install(monkeypatch)
    async with serving(app):
        await drained(redis)
    assert writes.with_command(b"XACK") == [
        [
            (b"MULTI",),
            (b"INCR", b"n:1"),
            (b"XACK", b"s", b"g", b"1-0"),
            (b"EXEC",),
            (b"MULTI",),
            (b"INCR", b"n:3"),
            (b"XACK", b"s", b"g", b"3-0"),
            (b"EXEC",),
            (b"XACK", b"s", b"g", b"2-0"),
        ]
    ]
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", None, b"1"]


async def test_a_command_failing_inside_exec_leaves_the_others_applied_and_is_reported(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    await redis.execute("SET", "not-a-number", "abc")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING), name="sub", pipeline=True, atomic=True
    )
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.set("applied", "yes")
        ctx.pipeline.incr("not-a-number")  # fails inside EXEC: Redis has no rollback

    async with serving(app) as running:
        await drained(redis)  # the XACK inside the same EXEC took effect

        async def reported() -> bool:
            await trio.lowlevel.checkpoint()
            return running.stats()["sub"].faults == 1

        await eventually(reported, what="the failed command reported as a fault")
    assert await redis.execute("GET", "applied") == b"yes"


# ---- "If a flush fails, the subscription reports that error once (a fault, not an app
# failure); an entry whose settle failed stays pending and is delivered again."


async def test_a_failed_flush_is_one_fault_and_its_entries_stay_pending_and_come_again() -> None:
    rules = ("app", "on", ">pw", "~*", "&*", "+@all", "-xack")
    with start_redis_server("--user", *rules) as server:
        url = f"redis://app:pw@{server.host}:{server.port}"
        async with connect(server.url) as admin:
            await fill(admin, "s", 3)
            app = App("svc")
            broker = app.broker(RedisBroker(url))
            seen: list[tuple[int, int]] = []
            source = RedisStream("s", group="g", start=BEGINNING, min_idle=0.3)

            @broker.subscriber(source, name="sub", pipeline=True, block=20, max_attempts=100)
            async def handle(n: int, ctx: Context) -> None:
                ctx.pipeline.incr(f"n:{n}")
                seen.append((n, ctx.attempt))

            async with serving(app) as running:

                async def failed() -> bool:
                    await trio.lowlevel.checkpoint()
                    return "flush" in running.stats()["sub"].degraded

                await eventually(failed, what="the failed flush reported")
                assert running.stats()["sub"].faults == 1  # one flush, one report
                assert await pending_count(admin, "s", "g") == 3  # kept, not lost
                await admin.execute("ACL", "SETUSER", "app", "+xack")
                await eventually(
                    lambda: _no_pending(admin), within=20, what="the entries acknowledged"
                )
                assert "flush" not in running.stats()["sub"].degraded
    assert {n for n, _ in seen} == {1, 2, 3}
    assert max(attempt for _, attempt in seen) >= 2  # delivered again after the failure


async def _no_pending(redis: RedisClient) -> bool:
    return await pending_count(redis, "s", "g") == 0


# ---- "With workers, ordered lanes and batch handlers: commit order is settle order; a batch
# handler gets one segment per element."


async def test_with_workers_commit_order_is_settle_order(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 4)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    finish_order = [3, 1, 4, 2]
    turn = {n: trio.Event() for n in finish_order}
    turn[finish_order[0]].set()

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING), pipeline=True, count=4, workers=4
    )
    async def handle(n: int, ctx: Context) -> None:
        await turn[n].wait()
        ctx.pipeline.rpush("order", n)
        following = finish_order.index(n) + 1
        if following < len(finish_order):
            turn[finish_order[following]].set()

    async with serving(app):
        await drained(redis)
    assert await redis.execute("LRANGE", "order", 0, -1) == [b"3", b"1", b"4", b"2"]


async def test_in_ordered_lanes_commit_order_is_settle_order_and_a_retry_in_place_discards(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 4)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING),
        pipeline=True,
        by_key=lambda n: n % 2,
        workers=2,
        max_attempts=3,
    )
    async def handle(n: int, ctx: Context) -> Outcome:
        ctx.pipeline.rpush(f"lane:{n % 2}", f"{n}@{ctx.attempt}")
        return retry() if n == 1 and ctx.attempt == 1 else ack()

    async with serving(app):
        await drained(redis)
    assert await redis.execute("LRANGE", "lane:1", 0, -1) == [b"1@2", b"3@1"]
    assert await redis.execute("LRANGE", "lane:0", 0, -1) == [b"2@1", b"4@1"]


async def test_a_batch_handler_gets_one_segment_per_element(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 3)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    done = trio.Event()

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING), pipeline=True, batch=3, max_wait=1
    )
    async def handle(ns: list[int], ctxs: list[Context]) -> list[Outcome]:
        assert len({id(ctx.pipeline) for ctx in ctxs}) == 3
        for n, ctx in zip(ns, ctxs, strict=True):
            ctx.pipeline.incr(f"n:{n}")
        done.set()
        return [ack(), drop(), ack()]

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
        await drained(redis)
    assert await values(redis, ["n:1", "n:2", "n:3"]) == [b"1", None, b"1"]


# ---- "ctx.pipeline on a subscription without a window is refused at mount."


def test_a_pipeline_on_a_subscription_without_a_window_is_refused_at_mount() -> None:
    broker = RedisBroker("redis://127.0.0.1:1")

    async def handle(n: int, pipeline: Pipeline) -> None: ...

    with pytest.raises(UnsupportedError, match="mount it with pipeline=True"):
        broker.subscriber(RedisStream("s", group="g"))(handle)


async def test_ctx_pipeline_without_a_window_raises_in_the_handler(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    errors: list[BaseException] = []
    done = trio.Event()

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), max_attempts=1)
    async def handle(n: int, ctx: Context) -> None:
        try:
            ctx.pipeline.incr("n")
        except UnsupportedError as exc:
            errors.append(exc)
        done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
    assert "no pipeline window" in str(errors[0])


def test_pipeline_on_a_plain_stream_and_atomic_alone_are_refused_at_mount() -> None:
    broker = RedisBroker("redis://127.0.0.1:1")

    async def handle(n: int) -> None: ...

    with pytest.raises(UnsupportedError, match="needs a consumer group"):
        broker.subscriber(RedisStream("s").replay(), pipeline=True)(handle)
    with pytest.raises(ConfigurationError, match="give pipeline=True too"):
        broker.subscriber(RedisStream("s", group="g"), atomic=True)(handle)
    with pytest.raises(ConfigurationError, match="True or False"):
        broker.subscriber(RedisStream("s", group="g"), pipeline="yes")(handle)


# ---- What a segment may hold: refused at the call, in the handler.


async def test_a_blocking_or_connection_changing_command_is_refused_when_queued(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    refused: list[str] = []
    done = trio.Event()

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        for name, args in (("BLPOP", ("q", 0)), ("SELECT", (1,)), ("MULTI", ())):
            try:
                ctx.pipeline.command(name, *args)
            except ConfigurationError as exc:
                refused.append(str(exc))
        ctx.pipeline.set("fine", "1")
        done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
        await drained(redis)
    assert len(refused) == 3
    assert "blocks" in refused[0] and "database" in refused[1] and "MULTI/EXEC" in refused[2]
    assert await redis.execute("GET", "fine") == b"1"


async def test_delete_on_ack_under_the_window_deletes_with_the_xack_atomically(
    redis_server: RedisServer, redis: RedisClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    await fill(redis, "s", 2)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING, delete_on_ack=True), pipeline=True
    )
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr(f"n:{n}")

    writes = Writes().install(monkeypatch)
    async with serving(app):
        await drained(redis)
    settle: list[tuple[bytes, ...]]
    if (await redis.server_commands()).has("xackdel"):  # one command: atomic by itself
        settle = [(b"XACKDEL", b"s", b"g", b"KEEPREF", b"IDS", b"2", b"1-0", b"2-0")]
    else:
        settle = [
            (b"MULTI",),
            (b"XACK", b"s", b"g", b"1-0", b"2-0"),
            (b"XDEL", b"s", b"1-0", b"2-0"),
            (b"EXEC",),
        ]
    sent = writes.with_command(b"XACKDEL") + writes.with_command(b"XACK")
    assert sent == [[(b"INCR", b"n:1"), (b"INCR", b"n:2"), *settle]]
    assert await redis.execute("XLEN", "s") == 0


async def test_a_segment_used_after_its_handler_returned_refuses_commands_and_sends_nothing(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    kept: list[tuple[Pipeline, Context]] = []

    @broker.subscriber(RedisStream("s", group="g", start=BEGINNING), pipeline=True)
    async def handle(n: int, ctx: Context) -> None:
        ctx.pipeline.incr("in-time")
        kept.append((ctx.pipeline, ctx))

    async with serving(app):
        await drained(redis)
        pipeline, ctx = kept[0]
        with pytest.raises(SegmentClosed, match="never sent"):
            pipeline.incr("late")
        with pytest.raises(SegmentClosed, match="already settled"):
            ctx.pipeline.incr("late")
    assert await values(redis, ["in-time", "late"]) == [b"1", None]


async def test_atomic_refuses_a_command_whose_keys_cannot_be_known_on_any_server(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await fill(redis, "s", 1)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    refused: list[str] = []

    @broker.subscriber(
        RedisStream("s", group="g", start=BEGINNING), pipeline=True, atomic=True, name="sub"
    )
    async def handle(n: int, ctx: Context) -> None:
        try:
            ctx.pipeline.sort("list", "BY", "nosort", "GET", "other:*")
        except SegmentRefused as exc:
            refused.append(str(exc))
        ctx.pipeline.eval("return redis.call('SET', KEYS[1], 'x')", 1, "known")  # keys declared

    async with serving(app):
        await drained(redis)
    assert len(refused) == 1 and "cannot be known without the server" in refused[0]
    assert await redis.execute("GET", "known") == b"x"
