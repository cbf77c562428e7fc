"""Redis lists under ``app.test()``: an in-process work queue with the same refusals and
outcomes, apart from streams of the same name, and the reliable list's crash recovery."""

from __future__ import annotations

import pytest
import trio

from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Context, Destination, ack, retry
from trio_streams.core.delivery import RETRY_COUNT_HEADER
from trio_streams.core.errors import ConfigurationError, UnsupportedError, WrongKeyType
from trio_streams.redis import RedisBroker, RedisList, RedisStream

URL = "redis://127.0.0.1:1"  # never connected: app.test() runs in process
JOBS = Destination.list("jobs")


async def test_a_list_is_a_work_queue_each_entry_to_one_of_its_consumers() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(URL))
    seen: dict[str, list[int]] = {"a": [], "b": []}

    @broker.subscriber(RedisList("jobs", reliable=True))
    async def a(n: int) -> None:
        seen["a"].append(n)

    @broker.subscriber(RedisList("jobs", reliable=True))
    async def b(n: int) -> None:
        seen["b"].append(n)

    async with app.test() as t:
        for n in range(10):
            await t.publish(JOBS, n)
    assert sorted(seen["a"] + seen["b"]) == list(range(10))


async def test_a_list_and_a_stream_of_the_same_name_never_meet_in_process() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisList("jobs"))
    async def from_list(n: int) -> None: ...

    @broker.subscriber(RedisStream("jobs"))
    async def from_stream(n: int) -> None: ...

    async with app.test() as t:
        await t.publish(JOBS, 1)
        await t.publish("jobs", 2)
        assert t.handler(from_list).messages == [1]
        assert t.handler(from_stream).messages == [2]
        assert [m.payload for m in t.published(JOBS)] == [b"1"]
        assert [m.payload for m in t.published("jobs")] == [b"2"]


@pytest.mark.parametrize("reliable", [False, True], ids=["simple", "reliable"])
async def test_retry_pushes_a_copy_with_the_retry_count_as_live(reliable: bool) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisList("jobs", reliable=reliable))
    async def handle(n: int, ctx: Context) -> object:
        return retry() if ctx.attempt == 1 else ack()

    async with app.test() as t:
        await t.publish(JOBS, 7)
        assert [c.delivery.attempt for c in t.handler(handle).calls] == [1, 2]
        [_, copy] = t.published(JOBS)
        assert copy.headers[RETRY_COUNT_HEADER] == "1"


async def test_a_dead_letter_goes_to_the_list_it_names_with_the_reason_headers() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisList("jobs", reliable=True), max_attempts=2, dead_letter="jobs.dead")
    async def handle(n: int) -> None:
        raise ValueError("nope")

    async with app.test() as t:
        await t.publish(JOBS, 3)
        [letter] = t.published(Destination.list("jobs.dead"))
        assert letter.payload == b"3"
        assert letter.headers["x-dead-letter-reason"] == "max-attempts"
        assert t.published("jobs.dead") == []  # a list, not a stream


async def test_pipeline_on_a_simple_list_is_refused_at_mount_as_live() -> None:
    broker = RedisBroker(URL)
    with pytest.raises(UnsupportedError, match="pipeline=True needs a reliable list"):

        @broker.subscriber(RedisList("jobs"), pipeline=True)
        async def handle(n: int) -> None: ...


async def test_the_window_on_a_reliable_list_keeps_the_segments_of_acks_in_process() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisList("jobs", reliable=True), pipeline=True)
    async def handle(n: int, ctx: Context) -> object:
        ctx.pipeline.incr(f"n:{n}")
        return ack() if n == 1 else retry() if ctx.attempt == 1 else ack()

    async with app.test() as t:
        await t.publish(JOBS, 1)
        await t.publish(JOBS, 2)
        record = t.handler(handle)
        assert record.segments == [[("INCR", "n:1")], [("INCR", "n:2")]]
        assert record.discarded_segments == [[("INCR", "n:2")]]


async def test_a_killed_reliable_consumer_gives_back_what_it_held_and_it_is_delivered_again() -> (
    None
):
    app = App("svc", shutdown_timeout=0.1)
    broker = app.broker(RedisBroker(URL))
    holding = trio.Event()
    again = trio.Event()
    seen: list[tuple[int, int]] = []

    @broker.subscriber(RedisList("jobs", reliable=True), count=10, workers=2)
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.attempt))
        if len(seen) == 1:
            holding.set()
            await trio.sleep_forever()  # the consumer dies while this runs
        again.set()

    async with app.test() as t:
        await broker.publish(JOBS, 1)
        with trio.fail_after(5):
            await holding.wait()
        assert t.kill_consumer(handle) == 1  # the reaper moves entry 1 back
        with trio.fail_after(5):
            await again.wait()
    assert seen == [(1, 1), (1, 2)]  # the death counted as a delivery, as live


async def test_a_killed_simple_consumer_loses_what_it_held() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisList("jobs"))
    async def handle(n: int) -> None: ...

    async with app.test() as t:
        await t.publish(JOBS, 1)
        assert t.kill_consumer(handle) == 0


async def test_kill_consumer_names_a_list_or_group_subscription() -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(URL))

    @broker.subscriber(RedisStream("orders").replay())
    async def handle(n: int) -> None: ...

    async with app.test() as t:
        with pytest.raises(ConfigurationError, match="reads neither a list nor a consumer group"):
            t.kill_consumer(handle)


@pytest.mark.parametrize("live", [True, False], ids=["live", "app.test()"])
@pytest.mark.parametrize("first", ["stream", "list"])
async def test_a_name_holds_a_list_or_a_stream_never_both_live_and_in_process(
    redis_server: RedisServer, live: bool, first: str
) -> None:
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    as_stream, as_list = "jobs", Destination.list("jobs")
    order: list[str | Destination] = (
        [as_stream, as_list] if first == "stream" else [as_list, as_stream]
    )
    if live:
        async with serving(app):
            await broker.publish(order[0], 1)
            with pytest.raises(WrongKeyType, match="'jobs' does not hold a"):
                await broker.publish(order[1], 1)
    else:
        async with app.test() as t:
            await t.publish(order[0], 1, unread_ok=True)  # the app reads nothing
            with pytest.raises(WrongKeyType, match=f"'jobs' holds a {first}, not a"):
                await t.publish(order[1], 1, unread_ok=True)


async def test_kill_consumer_ends_the_dead_consumers_handlers_and_its_window_as_a_crash_would() -> (
    None
):
    app = App("svc", shutdown_timeout=0.1)
    broker = app.broker(RedisBroker(URL))
    inside = trio.Event()
    seen: list[tuple[int, int]] = []
    cancelled: list[int] = []

    @broker.subscriber(RedisList("jobs", reliable=True), workers=2, pipeline=True)
    async def work(n: int, ctx: Context) -> None:
        seen.append((n, ctx.attempt))
        ctx.pipeline.incr(f"count:{n}")
        if len(seen) == 1:
            inside.set()
            try:
                await trio.sleep_forever()  # the consumer dies while this runs
            except trio.Cancelled:
                cancelled.append(n)
                raise

    async with app.test() as t:
        await broker.publish(Destination.list("jobs"), 1)
        with trio.fail_after(5):
            await inside.wait()
        assert t.kill_consumer(work) == 1
        await t.settled()  # nothing of the dead consumer is left in flight
        kept = [segment for segment in t.segments(work) if segment.kept]
    assert cancelled == [1]  # its handler ended with it
    assert seen == [(1, 1), (1, 2)]  # delivered again, counted
    assert len(kept) == 1  # only the live consumer's window was sent
