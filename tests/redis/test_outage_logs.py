"""What the log says while a real redis-server is down: a fault is logged cleared only once an
operation of its kind succeeded against the server again, and a dead letter is logged written
only once it is in its stream (a write that failed is logged as failed)."""

from __future__ import annotations

import logging

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import (
    App,
    Context,
    Destination,
    HealthState,
    Outcome,
    Position,
    RunningApp,
    ack,
    retry,
)
from trio_streams.core.codec import encode
from trio_streams.redis import RedisBroker, RedisChannel, RedisList, RedisStream
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import decode_frame, encode_frame
from trio_streams.redis.wire import encode_fields

_QUICK = "?backoff_initial=0.01&backoff_cap=0.1"


def _lines(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


class _HeldFirst:
    """Holds message 1 in its handler until the test has killed the server."""

    def __init__(self) -> None:
        self.first = trio.Event()
        self.killed = trio.Event()

    async def hold(self, n: int) -> bool:
        """True for message 1, once the server is down."""
        if n != 1:
            return False
        self.first.set()
        await self.killed.wait()
        return True

    async def kill_while_held(self, server: RedisServer) -> None:
        """Once message 1 is in its handler, kill ``server``, then let the handler go on."""
        with trio.fail_after(10):
            await self.first.wait()
        await trio.to_thread.run_sync(server.kill)
        self.killed.set()


async def _logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    async def there() -> bool:
        await trio.lowlevel.checkpoint()
        return bool(_lines(caplog, text))

    await eventually(there, within=20, what=f"a log line with {text!r}")


async def _running_again(running: RunningApp) -> None:
    """Wait until no fault is left (health ``running``), bounded."""
    with trio.fail_after(20):
        await running.health.wait_value(lambda h: h.state is HealthState.RUNNING)


async def test_a_settle_fault_is_logged_cleared_only_once_a_settle_reached_the_server_again(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_streams")
    for n in (1, 2, 3):  # one read takes all three
        await redis.execute("XADD", "orders", "*", *encode_fields(encode(n), {}))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + _QUICK))
    held, third, back = _HeldFirst(), trio.Event(), trio.Event()

    @broker.subscriber(
        RedisStream("orders", group="g", start=Position.beginning()), name="orders", count=3
    )
    async def handle(n: int) -> Outcome:
        if await held.hold(n):
            return retry()  # its copy cannot be written: the fault 'settle'
        if n == 3:
            third.set()
            await back.wait()
        return ack()  # 2: held for the read's one XACK, which waits for 3

    async with serving(app):
        await held.kill_while_held(redis_server)
        with trio.fail_after(10):
            await third.wait()  # 1 and 2 are settled (as far as they go) by now
        assert _lines(caplog, "fault 'settle': retry of entry")
        assert _lines(caplog, "cleared") == []  # an ack held back reached no server
        await trio.to_thread.run_sync(redis_server.start)
        back.set()  # 3's ack completes the read: its XACK reaches the server
        await _logged(caplog, "fault 'settle' cleared")


async def test_a_retry_fault_of_a_channel_is_not_logged_cleared_by_an_ack_that_writes_nothing(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_streams")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + _QUICK))
    held, second = _HeldFirst(), trio.Event()
    news = Destination.channel("news")

    @broker.subscriber(RedisChannel("news"), name="news")
    async def handle(n: int) -> Outcome:
        if await held.hold(n):
            return retry()  # its copy cannot be published: the fault 'retry'
        if n == 2:
            second.set()
        return ack()  # acknowledges nothing: no server is asked

    async with serving(app) as running:
        await broker.publish(news, 1)
        with trio.fail_after(10):
            await held.first.wait()
        await broker.publish(news, 2)  # received while 1 is handled
        await broker.publish(news, 3)  # so that 2's ack is over once 3 is handled
        await trio.to_thread.run_sync(redis_server.kill)
        held.killed.set()
        with trio.fail_after(10):
            await second.wait()
        await _logged(caplog, "fault 'retry'")
        with trio.fail_after(10):
            await running.health.wait_value(lambda h: h.state is HealthState.DEGRADED)
        assert _lines(caplog, "cleared") == []
        assert "retry" in running.health.value.reason
        await trio.to_thread.run_sync(redis_server.start)  # subscribed again: the server answers
        await _logged(caplog, "fault 'retry' cleared")
        await _running_again(running)


async def test_a_settle_fault_of_a_simple_list_is_not_logged_cleared_by_an_ack_that_writes_nothing(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_streams")
    for n in (1, 2, 3):  # one read pops all three
        await redis.execute("RPUSH", "jobs", encode_frame(encode(n), {}))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + _QUICK))
    held, third = _HeldFirst(), trio.Event()

    @broker.subscriber(RedisList("jobs"), name="jobs", count=3)
    async def handle(n: int) -> Outcome:
        if await held.hold(n):
            return retry()  # its copy cannot be pushed: the fault 'settle'
        if n == 3:
            third.set()
        return ack()  # popped already: nothing is written

    async with serving(app) as running:
        await held.kill_while_held(redis_server)
        with trio.fail_after(10):
            await third.wait()
        await _logged(caplog, "fault 'settle': retry copy")
        assert _lines(caplog, "cleared") == []
        assert "settle" in running.health.value.reason
        await trio.to_thread.run_sync(redis_server.start)  # the server answers again
        await _logged(caplog, "fault 'settle' cleared")


async def test_a_dead_letter_is_logged_after_it_is_in_its_stream_and_a_failed_one_as_failed(
    redis_server: RedisServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trio_streams")
    in_stream_when_logged: list[int] = []

    class ReadBack(logging.Handler):
        """Reads the dead-letter stream back the moment the letter is logged written."""

        def emit(self, record: logging.LogRecord) -> None:
            if "dead-lettered to" in record.getMessage():
                in_stream_when_logged.append(redis_server.command("XLEN", "news.dead"))

    watcher = ReadBack()
    logging.getLogger("trio_streams").addHandler(watcher)
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + _QUICK))
    held = _HeldFirst()
    news = Destination.channel("news")

    @broker.subscriber(
        RedisChannel("news", dead_letter_kind="stream"),
        name="news",
        max_attempts=1,
        dead_letter="news.dead",
    )
    async def handle(n: int) -> None:
        await held.hold(n)
        raise ValueError(f"refused {n}")

    try:
        async with serving(app) as running:
            await broker.publish(news, 1)
            with trio.fail_after(10):
                await held.first.wait()
            await trio.to_thread.run_sync(redis_server.kill)
            held.killed.set()
            await _logged(caplog, "not dead-lettered")
            assert _lines(caplog, "dead-lettered to") == []
            [failed] = _lines(caplog, "not dead-lettered")
            assert "news.dead" in failed and "refused 1" in failed

            await trio.to_thread.run_sync(redis_server.start)
            with trio.fail_after(20):
                await running.health.wait_value(lambda h: h.state is HealthState.RUNNING)
            assert await broker.publish(news, 2) == 1
            await _logged(caplog, "dead-lettered to")
    finally:
        logging.getLogger("trio_streams").removeHandler(watcher)
    assert in_stream_when_logged == [1]
    [(_, fields)] = redis_server.command("XRANGE", "news.dead", "-", "+")
    payload, _ = decode_frame(fields[1]) if fields[0] == b"frame" else (fields[1], None)
    assert b"2" in payload


async def test_failures_in_an_outage_promise_no_retry_and_the_fault_counts_the_failed_settles(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_streams")
    for n in range(1, 8):  # one read takes all seven
        await redis.execute("XADD", "jobs", "*", *encode_fields(encode(n), {}))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + _QUICK))
    held, seventh, back = _HeldFirst(), trio.Event(), trio.Event()

    @broker.subscriber(
        RedisStream("jobs", group="g", start=Position.beginning()),
        name="jobs",
        max_attempts=3,
        retry_delay=0.2,
    )
    async def handle(n: int) -> None:
        await held.hold(n)  # the server is down from the first message on
        if n == 7:  # one worker: the six before it are settled (as far as they go) by now
            seventh.set()
            await back.wait()
            return
        raise ValueError("boom")

    async with serving(app) as running:
        await held.kill_while_held(redis_server)
        with trio.fail_after(10):
            await seventh.wait()
        # Each failure says what happened, and promises nothing: no retry was written.
        failures = _lines(caplog, "handler failed on attempt")
        assert len(failures) == 6
        assert all("attempt 1 of 3" in f and "ValueError: boom" in f for f in failures)
        assert [f for f in failures if "retry" in f] == []
        assert _lines(caplog, "retrying") == []
        assert _lines(caplog, "retry of message") == []  # a written retry says so; none was
        # The fault begins once: the settles that fail meanwhile are counted, not logged.
        assert len(_lines(caplog, "fault 'settle':")) == 1
        assert _lines(caplog, "fault 'settle' cleared") == []
        await trio.to_thread.run_sync(redis_server.start)
        back.set()
        await _logged(caplog, "fault 'settle' cleared")
        [cleared] = _lines(caplog, "fault 'settle' cleared")
        assert cleared.endswith("after 6 failed settles; the entries stayed pending")
        await _running_again(running)


async def test_a_retry_written_is_logged_once_it_is_written(
    redis_server: RedisServer, redis: RedisClient, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="trio_streams")
    await redis.execute("XADD", "jobs", "*", *encode_fields(encode(1), {}))
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url + _QUICK))
    second = trio.Event()

    @broker.subscriber(
        RedisStream("jobs", group="g", start=Position.beginning()),
        name="jobs",
        max_attempts=2,
        retry_delay=0.2,
    )
    async def handle(n: int, ctx: Context) -> None:
        if ctx.attempt == 2:
            second.set()
            return
        raise ValueError("boom")

    async with serving(app):
        with trio.fail_after(10):
            await second.wait()
    [written] = _lines(caplog, "retry of message")
    assert "written for 0.2s from now" in written
    [failure] = _lines(caplog, "handler failed on attempt 1 of 2")
    assert "retry" not in failure
    assert _lines(caplog, "cleared") == []
