"""A dead letter the server refuses (its key holds another type: a string, a hash), against a
real server (the key changes type after the start, which refuses a key of another type): a
simple list puts the popped entry back at the front of its list, in the order
the entries were popped, instead of losing it; a reliable list leaves it in its processing
list. Either way the log says what happened, and never "dead-lettered" for a letter that was
not written."""

from __future__ import annotations

import logging

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context
from trio_streams.redis import RedisBroker, RedisList
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import REDELIVERED_HEADER, encode_frame
from trio_streams.redis.lists import processing_key

from .support import frames, length, values

DEAD = "jobs.dead"

#: How the dead-letter key is made to hold another type, and what it then holds.
OTHER_TYPES = {
    "string": (("SET", DEAD, "another type"), ("GET", DEAD), b"another type"),
    "hash": (("HSET", DEAD, "f", "v"), ("HGETALL", DEAD), {b"f": b"v"}),
}


def warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]


def assert_logged_as_refused(caplog: pytest.LogCaptureFixture, what_happened: str) -> None:
    lines = warnings(caplog)
    assert not any("dead-lettered to" in line for line in lines), lines
    refused = [line for line in lines if "not dead-lettered" in line]
    assert refused, lines
    for line in refused:
        assert f"dead letter to {DEAD!r} of an entry of list 'jobs' failed" in line, line
        assert "WRONGTYPE" in line, line
        assert what_happened in line, line


@pytest.mark.parametrize("kind", ["list", "stream"])
@pytest.mark.parametrize("other", sorted(OTHER_TYPES))
async def test_a_simple_list_puts_an_entry_whose_dead_letter_is_refused_back_to_be_handled_again(
    redis_server: RedisServer,
    redis: RedisClient,
    caplog: pytest.LogCaptureFixture,
    kind: str,
    other: str,
) -> None:
    make, read, holds = OTHER_TYPES[other]
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[tuple[bytes, dict[str, str]]] = []
    again = trio.Event()

    @broker.subscriber(RedisList("jobs", dead_letter_kind=kind), max_attempts=1, dead_letter=DEAD)
    async def handle(payload: bytes, ctx: Context) -> None:
        seen.append((payload, dict(ctx.headers)))
        if len(seen) == 1:
            raise ValueError("nope")  # the one attempt: dead-lettered, and refused
        again.set()

    async with serving(app):
        await redis.execute(*make)  # after the start, which refuses a key of another type
        await redis.execute("RPUSH", "jobs", encode_frame(b"5", {"trace": "t"}))
        with trio.fail_after(10):
            await again.wait()
    # The same entry, as it was popped: not a copy with new headers.
    assert seen == [(b"5", {"trace": "t"})] * 2
    assert await redis.execute(*read) == holds
    assert await length(redis, "jobs") == 0
    assert_logged_as_refused(caplog, "put back at the front of list 'jobs'")


@pytest.mark.parametrize("pop", ["left", "right"])
async def test_refused_dead_letters_go_back_at_the_front_in_the_order_the_entries_were_popped(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture, pop: str
) -> None:
    # Each letter is refused while the app drains: reading has stopped, so the entries stay
    # where they were put back, and the list shows the order.
    app = App("svc", shutdown_timeout=10)
    broker = app.broker(RedisBroker(redis_server.url))
    draining = trio.Event()
    first = trio.Event()

    @app.on_shutdown
    def stop_waiting() -> None:
        draining.set()

    @broker.subscriber(
        RedisList("jobs", pop=pop), count=3, max_attempts=1, dead_letter=DEAD, workers=1
    )
    async def handle(n: int) -> None:
        first.set()
        await draining.wait()
        raise ValueError(f"nope {n}")

    push = "RPUSH" if pop == "left" else "LPUSH"  # the end the consumers do not pop
    for n in (1, 2, 3):
        await redis.execute(push, "jobs", encode_frame(str(n).encode(), {}))
    async with serving(app):
        await redis.execute(
            "SET", DEAD, "another type"
        )  # after the start, which refuses a key of another type
        with trio.fail_after(10):
            await first.wait()  # 1 in the handler, 2 and 3 queued: one read
        await redis.execute(push, "jobs", encode_frame(b"4", {}))

        async def popped() -> bool:
            return await length(redis, "jobs") == 0

        await eventually(popped, what="entry 4 popped by a second read")
    in_list = [payload for payload, _ in await frames(redis, "jobs")]
    if pop == "right":
        in_list.reverse()  # the front is the right end
    assert in_list == [b"1", b"2", b"3", b"4"]
    assert await redis.execute("GET", DEAD) == b"another type"
    assert_logged_as_refused(caplog, "put back at the front of list 'jobs'")


@pytest.mark.parametrize("kind", ["list", "stream"])
async def test_a_reliable_list_logs_a_refused_dead_letter_as_left_in_its_processing_list(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture, kind: str
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    tries = 0

    @broker.subscriber(
        RedisList("jobs", reliable=True, consumer="w1", dead_letter_kind=kind),
        max_attempts=1,
        dead_letter=DEAD,
    )
    async def handle(n: int) -> None:
        nonlocal tries
        tries += 1
        raise ValueError("nope")

    def refusals() -> int:
        return sum("not dead-lettered" in r.getMessage() for r in caplog.records)

    async with serving(app):
        await redis.execute(
            "HSET", DEAD, "f", "v"
        )  # after the start, which refuses a key of another type
        await redis.execute("RPUSH", "jobs", encode_frame(b"5", {}))

        async def refused_twice() -> bool:
            await trio.lowlevel.checkpoint()
            return refusals() >= 2

        # Delivered again from the processing list, already at its one attempt: the dead
        # letter is tried again, without running the handler again.
        await eventually(refused_twice, what="the dead letter refused twice")
    assert tries == 1
    assert await redis.execute("HGETALL", DEAD) == {b"f": b"v"}
    # Nothing lost: the graceful close put the entry back on the list, with its one run.
    assert await values(redis, "jobs") == [encode_frame(b"5", {REDELIVERED_HEADER: "1"})]
    assert await length(redis, processing_key("jobs", "w1")) == 0
    assert_logged_as_refused(caplog, "it stays in processing list")


async def test_an_entry_whose_dead_letter_keeps_being_refused_is_not_handled_in_a_hot_loop(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    runs: list[float] = []

    @broker.subscriber(RedisList("jobs"), max_attempts=1, dead_letter=DEAD)
    async def handle(n: int) -> None:
        runs.append(trio.current_time())
        raise ValueError("nope")

    async with serving(app):
        await redis.execute(
            "SET", DEAD, "another type"
        )  # after the start, which refuses a key of another type
        await redis.execute("RPUSH", "jobs", encode_frame(b"5", {}))

        async def a_second_passed() -> bool:
            await trio.lowlevel.checkpoint()
            return len(runs) >= 2 and runs[-1] - runs[0] >= 1.0

        await eventually(a_second_passed, within=10, what="a second of refusals")
    # The pause after each refusal doubles from 10 ms: a handful of runs in the first second,
    # not the thousands a loop without one makes.
    first_second = [t for t in runs if t - runs[0] <= 1.0]
    assert len(first_second) <= 10, len(first_second)
    assert await values(redis, "jobs") == [encode_frame(b"5", {})]  # still not lost
