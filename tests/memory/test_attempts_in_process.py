"""Under ``app.test()`` an attempt is a handler run too: ``t.kill_consumer`` charges only the
runs under way, for a consumer group member and for a reliable list (as live)."""

from __future__ import annotations

import pytest
import trio

from trio_streams import App, Context, Destination, MemoryBroker, MemoryStream
from trio_streams.core.transport import Source
from trio_streams.redis import RedisBroker, RedisList, RedisStream

URL = "redis://127.0.0.1:1"  # never connected: app.test() runs every app in process


def case(name: str) -> tuple[App, Source, str | Destination]:
    """A fresh app with one broker, the source to mount and where to publish."""
    app = App("svc", shutdown_timeout=0.1)
    if name == "memory group":
        app.broker(MemoryBroker())
        return app, MemoryStream("jobs", group="g"), "jobs"
    app.broker(RedisBroker(URL))
    if name == "redis group":
        return app, RedisStream("jobs", group="g"), "jobs"
    return app, RedisList("jobs", reliable=True), Destination.list("jobs")


CASES = ["memory group", "redis group", "reliable list"]


@pytest.mark.parametrize("name", CASES)
async def test_a_kill_charges_the_run_under_way_and_not_what_was_only_read(name: str) -> None:
    app, source, where = case(name)
    [broker] = app.brokers
    running = trio.Event()
    seen: list[tuple[int, int]] = []

    @broker.subscriber(source, count=10, name="handle")
    async def handle(n: int, ctx: Context) -> None:
        seen.append((n, ctx.attempt))
        if len(seen) == 1:
            running.set()
            await trio.sleep_forever()  # its consumer dies while this runs

    async with app.test() as t:
        for n in (1, 2, 3):
            await broker.publish(where, n)
        with trio.fail_after(5):
            await running.wait()
        assert t.kill_consumer(handle) == 3
        await t.settled()
    assert seen == [(1, 1), (1, 2), (2, 1), (3, 1)]


async def poison_killed_at_every_run(name: str, *, workers: int) -> list[tuple[int, int]]:
    """Ten messages, the fourth a poison whose every run its consumer dies in (the test kills
    it there, three times); the others take 10 ms. Returns each run's (message, attempt),
    once the poison alone has been dead-lettered."""
    app, source, where = case(name)
    [broker] = app.brokers
    runs: list[tuple[int, int]] = []
    poisoned = [trio.Event()]

    @broker.subscriber(
        source, count=10, workers=workers, name="handle", max_attempts=3, dead_letter="dead"
    )
    async def handle(n: int, ctx: Context) -> None:
        runs.append((n, ctx.attempt))
        if n == 4:
            poisoned[0].set()
            await trio.sleep_forever()  # the crash: the test kills the consumer here
        await trio.sleep(0.01)

    async with app.test() as t:
        for n in range(1, 11):
            await broker.publish(where, n)
        for _ in range(3):
            with trio.fail_after(5):
                await poisoned[0].wait()
            poisoned[0] = trio.Event()
            t.kill_consumer(handle)
        await t.settled()
        dead = t.published(Destination.list("dead") if isinstance(where, Destination) else "dead")
        assert [m.decode(int) for m in dead] == [4]
    assert [a for n, a in runs if n == 4] == [1, 2, 3]
    return runs


def attempts_of(runs: list[tuple[int, int]], n: int) -> list[int]:
    return [attempt for m, attempt in runs if m == n]


@pytest.mark.parametrize("name", CASES)
async def test_a_poison_killed_at_every_run_is_dead_lettered_after_exactly_max_attempts_runs(
    name: str,
) -> None:
    runs = await poison_killed_at_every_run(name, workers=1)
    # The neighbours ran to their end each time they ran; none was charged a run it did not
    # have, so none reached the cap.
    for n in set(range(1, 11)) - {4}:
        attempts = attempts_of(runs, n)
        assert attempts == list(range(1, len(attempts) + 1)) and attempts, (n, attempts)


@pytest.mark.parametrize("name", CASES)
async def test_entries_under_way_beside_a_poison_come_back_to_run_alone_and_finish(
    name: str,
) -> None:
    runs = await poison_killed_at_every_run(name, workers=4)
    for n in set(range(1, 11)) - {4}:
        # Under way beside the poison once (that run counts), then alone: never dead-lettered.
        assert attempts_of(runs, n) in ([1], [1, 2]), (n, attempts_of(runs, n))
