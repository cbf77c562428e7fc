"""The reliable list's recovery: heartbeats, the reaper script, taking back the own list."""

from __future__ import annotations

import hashlib
import random
from collections import Counter

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Destination
from trio_streams.core.errors import ConfigurationError
from trio_streams.redis import ConsumerNameInUse, RedisBroker, RedisList
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.frames import (
    REDELIVERED_HEADER,
    decode_frame,
    encode_frame,
    take_redeliveries,
)
from trio_streams.redis.list_scripts import REAP, TAKE_BACK
from trio_streams.redis.lists import attempts_key, consumers_key, heartbeat_key, processing_key

from .support import length, values


def _frame(n: int) -> bytes:
    return encode_frame(str(n).encode(), {})


async def _plant(
    redis: RedisClient,
    consumer: str,
    numbers: range,
    *,
    heartbeat_ms: int | None = None,
    runs: dict[int, int] | None = None,
) -> None:
    """A consumer that took ``numbers`` (oldest first) into its processing list, and has a live
    heartbeat for ``heartbeat_ms`` (None: none, it is dead); its handlers ran ``runs[n]`` times
    on ``n`` (its attempt ledger)."""
    for n in numbers:  # moved in at the left, as BLMOVE ... LEFT does
        await redis.execute("LPUSH", processing_key("jobs", consumer), _frame(n))
    for n, count in (runs or {}).items():
        digest = hashlib.sha1(_frame(n)).hexdigest()
        await redis.execute("HSET", attempts_key("jobs", consumer), digest, count)
    await redis.execute("SADD", consumers_key("jobs"), consumer)
    if heartbeat_ms is not None:
        await redis.execute("SET", heartbeat_key("jobs", consumer), consumer, "PX", heartbeat_ms)


def _reap(consumer: str, *, force: bool = False) -> tuple[object, ...]:
    return (
        "EVAL", REAP, 5, "jobs", processing_key("jobs", consumer),
        heartbeat_key("jobs", consumer), consumers_key("jobs"), attempts_key("jobs", consumer),
        consumer, "LPUSH", "1" if force else "0", REDELIVERED_HEADER,
    )  # fmt: skip


def _counted(n: int, times: int = 1) -> bytes:
    """``_frame(n)`` as it comes back from consumers whose handlers ran it ``times`` times."""
    return encode_frame(str(n).encode(), {REDELIVERED_HEADER: str(times)})


async def test_the_reaper_leaves_a_consumer_with_a_live_heartbeat_alone(
    redis: RedisClient,
) -> None:
    await _plant(redis, "alive", range(1, 4), heartbeat_ms=60_000)
    assert await redis.execute(*_reap("alive")) == -1
    assert await length(redis, processing_key("jobs", "alive")) == 3
    assert await length(redis, "jobs") == 0


async def test_the_reaper_moves_a_dead_consumers_list_back_to_the_front_oldest_first(
    redis: RedisClient,
) -> None:
    await redis.execute("RPUSH", "jobs", _frame(100))
    await _plant(redis, "dead", range(1, 4), runs={1: 1})
    assert await redis.execute(*_reap("dead")) == 3
    # 1 was under way when it died: it carries the run, so max_attempts sees the crash; 2 and
    # 3 were only read, and go back as they were.
    assert await values(redis, "jobs") == [_counted(1), _frame(2), _frame(3), _frame(100)]
    assert await redis.execute("EXISTS", processing_key("jobs", "dead")) == 0
    assert await redis.execute("EXISTS", attempts_key("jobs", "dead")) == 0
    assert await redis.execute("SMEMBERS", consumers_key("jobs")) == []


async def test_two_reapers_racing_never_move_an_entry_twice(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    entries = 2000
    await _plant(redis, "dead", range(entries))
    moved: list[int] = []

    async def reaper() -> None:
        async with connect(redis_server.url) as own:
            for _ in range(20):
                reply = await own.execute(*_reap("dead"))
                moved.append(int(reply))

    async with trio.open_nursery() as nursery:
        for _ in range(8):
            nursery.start_soon(reaper)
    assert sum(m for m in moved if m > 0) == entries
    assert sorted(m for m in moved if m > 0) == [entries]  # one pass moved all, the rest none
    found = await values(redis, "jobs")
    assert len(found) == entries and len(set(found)) == entries


async def test_heartbeat_expiry_then_a_live_consumers_reaper_redelivers_the_entries(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await _plant(redis, "dead", range(1, 6), heartbeat_ms=60_000, runs={1: 1, 2: 2})
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    attempts: list[int] = []
    done = trio.Event()

    source = RedisList("jobs", reliable=True, consumer="live", heartbeat=1.0, reap_every=0.05)

    @broker.subscriber(source, count=10)
    async def handle(n: int, ctx: Context) -> None:
        seen.append(n)
        attempts.append(ctx.attempt)
        if len(seen) == 6:
            done.set()

    async with serving(app):
        await broker.publish(Destination.list("jobs"), 0)

        async def handled_the_new_one() -> bool:
            return seen == [0]

        await eventually(handled_the_new_one, what="the new entry handled")
        # The heartbeat is alive: passes of the reaper leave the processing list alone.
        assert await length(redis, processing_key("jobs", "dead")) == 5
        await redis.execute("DEL", heartbeat_key("jobs", "dead"))  # it expires
        with trio.fail_after(10):
            await done.wait()
    assert seen == [0, 1, 2, 3, 4, 5]
    # The dead consumer's entries: the runs they had there count, a read does not.
    assert attempts == [1, 2, 3, 1, 1, 1]
    assert await redis.execute("EXISTS", processing_key("jobs", "dead")) == 0
    assert await redis.execute("SMEMBERS", consumers_key("jobs")) == []


async def test_two_live_reapers_on_one_dead_list_hand_every_entry_out_once(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    entries = 300
    await _plant(redis, "dead", range(entries))
    handled: Counter[int] = Counter()
    done = trio.Event()

    def app_for(name: str) -> App:
        app = App(f"svc-{name}")
        broker = app.broker(RedisBroker(redis_server.url))
        source = RedisList("jobs", reliable=True, consumer=name, reap_every=0.01)

        @broker.subscriber(source, count=20)
        async def handle(n: int) -> None:
            handled[n] += 1
            if sum(handled.values()) == entries:
                done.set()

        return app

    async with serving(app_for("a")), serving(app_for("b")):
        with trio.fail_after(20):
            await done.wait()
    assert set(handled) == set(range(entries))
    assert max(handled.values()) == 1


async def test_a_restart_with_the_same_name_takes_back_its_processing_list_first(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    # w1 died holding 1, 2, 3 a moment ago: its heartbeat has not expired yet.
    await _plant(redis, "w1", range(1, 4), heartbeat_ms=60_000)
    for n in (10, 11):
        await redis.execute("RPUSH", "jobs", _frame(n))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), count=1)
    async def handle(n: int) -> None:
        seen.append(n)
        if len(seen) == 5:
            done.set()

    async with serving(app):
        with trio.fail_after(10):
            await done.wait()
    assert seen == [1, 2, 3, 10, 11]
    assert await redis.execute("EXISTS", processing_key("jobs", "w1")) == 0


async def test_a_reconnect_takes_back_what_a_cut_move_left_in_the_processing_list(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    first = trio.Event()
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), block=50)
    async def handle(n: int) -> None:
        seen.append(n)
        first.set()
        if len(seen) == 3:
            done.set()

    async with serving(app):
        await broker.publish(Destination.list("jobs"), 1)
        with trio.fail_after(10):
            await first.wait()
        # As if a move's reply was lost with its connection: the entry sits in the processing
        # list, not held by the consumer. A reconnect finds it.
        await redis.execute("LPUSH", processing_key("jobs", "w1"), _frame(2))
        await redis.execute("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
        await broker.publish(Destination.list("jobs"), 3)
        with trio.fail_after(10):
            await done.wait()
    assert sorted(seen) == [1, 2, 3]
    assert await length(redis, processing_key("jobs", "w1")) == 0


async def test_the_subscription_renews_its_heartbeat_while_it_runs(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1", heartbeat=0.3))
    async def handle(n: int) -> None: ...

    key = heartbeat_key("jobs", "w1")
    async with serving(app):
        first = int(await redis.execute("PTTL", key))
        assert 0 < first <= 300
        lowest = first

        async def renewed() -> bool:
            nonlocal lowest
            ttl = int(await redis.execute("PTTL", key))
            assert ttl > 0, "the heartbeat expired while its subscription ran"
            if ttl > lowest:
                return True  # it went up: renewed
            lowest = ttl
            return False

        for _ in range(3):  # renewed again and again, never expiring
            lowest = int(await redis.execute("PTTL", key))
            await eventually(renewed, within=5, what="the heartbeat renewed")


def _cases() -> list[bytes]:
    """List entries of every shape: frames with and without headers, UTF-8 of every width,
    invalid UTF-8, counts that lie, truncations, a count already there (valid or not), equal
    names, and random bytes."""
    rng = random.Random(20261202)
    names = ["trace", "é", "名前", "😀", "", REDELIVERED_HEADER, "x"]
    values_ = ["", "1", "42", "x1", "٣", "💥", "a" * 300]
    cases = [b"", b"\x00", b"\x00\x00\x00", b"plain", b'{"id": 1}', bytes(4), bytes(4) + b"p"]
    for _ in range(400):
        headers = {rng.choice(names): rng.choice(values_) for _ in range(rng.randrange(4))}
        frame = encode_frame(rng.randbytes(rng.randrange(12)), headers)
        cases.append(frame)
        cases.append(frame[: rng.randrange(len(frame) + 1)])  # cut anywhere
        mangled = bytearray(frame)
        if len(mangled) > 4:
            mangled[rng.randrange(4, len(mangled))] = rng.choice([0x80, 0xC0, 0xED, 0xF5, 0xFF])
        cases.append(bytes(mangled))
        cases.append(rng.randbytes(rng.randrange(40)))
    # Equal names: the last wins, in Python's reading and in the script's.
    cases.append(
        b"".join([b"\x00\x00\x00\x02", *(_header(REDELIVERED_HEADER, v) for v in ("7", "2"))])
    )
    cases.append(b"".join([b"\x00\x00\x00\x02", _header("a", "1"), _header("a", "2"), b"p"]))
    # What strict UTF-8 refuses at each width, and its nearest valid neighbours.
    for raw in (b"\xed\xa0\x80", b"\xed\x9f\xbf", b"\xc0\x80", b"\xc2\x80", b"\xe0\x80\x80",
                b"\xe0\xa0\x80", b"\xf0\x80\x80\x80", b"\xf0\x90\x80\x80", b"\xf4\x90\x80\x80",
                b"\xf4\x8f\xbf\xbf", b"\xf5\x80\x80\x80", b"\xe1\x80", b"\x80"):  # fmt: skip
        field = len(raw).to_bytes(4, "big") + raw
        cases.append(b"\x00\x00\x00\x01" + field + _header("v", "1")[5:] + b"p")  # as a name
        cases.append(b"\x00\x00\x00\x01" + len(b"n").to_bytes(4, "big") + b"n" + field + b"p")
    return cases


def _header(name: str, value: str) -> bytes:
    raw_name, raw_value = name.encode(), value.encode()
    return (
        len(raw_name).to_bytes(4, "big") + raw_name + len(raw_value).to_bytes(4, "big") + raw_value
    )


async def test_the_count_the_script_writes_reads_back_as_the_same_entry_charged_with_its_runs(
    redis: RedisClient,
) -> None:
    cases = list(dict.fromkeys(_cases()))  # equal values share one count: one of each here
    processing = processing_key("jobs", "w1")
    ledger = attempts_key("jobs", "w1")
    for value in reversed(cases):  # LRANGE answers newest first: the first case at the left
        await redis.execute("LPUSH", processing, value)
    # Every other case had runs (1 to 3) at the dead consumer; the rest was only read.
    charged = {value: 1 + i % 3 for i, value in enumerate(cases) if i % 2 == 0}
    for value, runs in charged.items():
        await redis.execute("HSET", ledger, hashlib.sha1(value).hexdigest(), runs)
    reply = await redis.execute("EVAL", TAKE_BACK, 2, processing, ledger, REDELIVERED_HEADER)
    counted = [bytes(v) for v in reply]
    assert await values(redis, processing) == counted  # charged in place
    assert await redis.execute("EXISTS", ledger) == 0
    for before, after in zip(cases, counted, strict=True):
        if before not in charged:
            assert after == before  # no run: not touched
            continue
        payload, headers = decode_frame(before)
        again = take_redeliveries(headers)
        payload_after, headers_after = decode_frame(after)
        assert payload_after == payload, before
        assert take_redeliveries(headers_after) == again + charged[before], before
        assert headers_after == headers, before


async def test_a_graceful_close_puts_back_what_it_held_uncounted(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    for n in range(1, 6):
        await redis.execute("RPUSH", "jobs", _frame(n))
    handled: dict[int, int] = {}
    first = trio.Event()
    release = trio.Event()

    def app_for(*, hold: bool) -> App:
        app = App("svc")
        broker = app.broker(RedisBroker(redis_server.url))

        @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"), count=5)
        async def handle(n: int, ctx: Context) -> None:
            if hold and n == 1:
                first.set()
                await release.wait()
            handled[n] = ctx.attempt

        return app

    async with serving(app_for(hold=True)):
        with trio.fail_after(10):
            await first.wait()
        assert await length(redis, processing_key("jobs", "w1")) == 5
        release.set()  # the close drains entry 1; what it never handed on goes back
    async with serving(app_for(hold=False)):

        async def all_handled() -> bool:
            return sorted(handled) == [1, 2, 3, 4, 5]

        await eventually(all_handled, what="every entry handled")
    assert set(handled.values()) == {1}  # nobody died: no entry counted as delivered again


def test_two_subscriptions_of_one_list_under_one_consumer_name_are_refused_at_mount() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker("redis://127.0.0.1:1"))

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"))
    async def first(n: int) -> None: ...

    with pytest.raises(ConfigurationError, match="already consumes list 'jobs' as 'w1'"):

        @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1"))
        async def second(n: int) -> None: ...


async def test_a_second_live_consumer_under_a_name_in_use_fails_its_start_naming_it(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    def app_for(name: str) -> tuple[App, list[int]]:
        app = App(name)
        broker = app.broker(RedisBroker(redis_server.url))
        seen: list[int] = []
        source = RedisList("jobs", reliable=True, consumer="w1", heartbeat=0.6)

        @broker.subscriber(source)
        async def handle(n: int) -> None:
            seen.append(n)

        return app, seen

    first, seen = app_for("first")
    second, _ = app_for("second")
    async with serving(first):
        with pytest.RaisesGroup(
            pytest.RaisesExc(ConsumerNameInUse, match="another live consumer of list 'jobs' goes")
        ):
            async with serving(second):
                pass
        # The first is untouched: its heartbeat, and its deliveries.
        await redis.execute("RPUSH", "jobs", _frame(1))

        async def handled() -> bool:
            await trio.lowlevel.checkpoint()
            return seen == [1]

        await eventually(handled, what="the first consumer still handling")
        assert await redis.execute("EXISTS", heartbeat_key("jobs", "w1")) == 1


async def test_a_restart_under_its_name_takes_over_a_dead_consumers_heartbeat_at_once(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    # A heartbeat of 60 s that nobody renews: its holder died a moment ago, running 1.
    await _plant(redis, "w1", range(1, 4), heartbeat_ms=60_000, runs={1: 1})
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[int, int]] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="w1", heartbeat=0.6))
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.attempt))
        if len(seen) == 3:
            done.set()

    with trio.fail_after(10):  # a renewal period of this consumer's heartbeat, not 60 s
        async with serving(app):
            await done.wait()
    assert seen == [(1, 2), (2, 1), (3, 1)]
