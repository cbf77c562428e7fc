"""Concurrency shapes: sequential, workers, ordered lanes, batches; and back-pressure."""

import random
from collections import defaultdict
from dataclasses import dataclass

import trio
import trio.testing

from tests.support import serving
from trio_streams import App, Context, MemoryBroker, MemoryStream, ack, drop, retry


@dataclass
class Event:
    key: str
    n: int


async def test_sequential_by_default_in_order(autojump_clock: trio.abc.Clock) -> None:
    rng = random.Random(1)
    app = App("svc")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []
    active = 0
    most = 0

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await trio.sleep(rng.random() / 10)
        seen.append(n)
        active -= 1

    async with app.test() as t:
        for n in range(50):
            await broker.publish("s", n)
        await t.settled()
    assert seen == list(range(50))
    assert most == 1


async def test_workers_run_handlers_concurrently(autojump_clock: trio.abc.Clock) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    active = 0
    most = 0
    done: list[int] = []

    @broker.subscriber(MemoryStream("s"), workers=4)
    async def handle(n: int) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await trio.sleep(1)
        active -= 1
        done.append(n)

    async with app.test() as t:
        start = trio.current_time()
        for n in range(8):
            await broker.publish("s", n)
        await t.settled()
        assert trio.current_time() - start == 2  # 8 one-second handlers on 4 workers
    assert most == 4
    assert sorted(done) == list(range(8))


async def test_lanes_keep_per_key_order_under_workers_8(autojump_clock: trio.abc.Clock) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    order: dict[str, list[int]] = defaultdict(list)
    active = 0
    most = 0
    rng = random.Random(7)

    @broker.subscriber(MemoryStream("events"), workers=8, by_key=lambda e: e.key)
    async def handle(event: Event) -> None:
        nonlocal active, most
        active += 1
        most = max(most, active)
        await trio.sleep(rng.random() / 10)
        order[event.key].append(event.n)
        active -= 1

    # Virtual time: a lane may get many keys (string hashes vary between runs).
    async with app.test(settle_timeout=3600) as t:
        for n in range(2000):
            await broker.publish("events", Event(f"k{n % 23}", n))
        await t.settled()
    assert sum(len(v) for v in order.values()) == 2000
    for key, ns in order.items():
        assert ns == sorted(ns), f"lane for {key} reordered"
    assert most > 1  # lanes did run side by side


async def test_lanes_can_key_on_a_header(autojump_clock: trio.abc.Clock) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    order: dict[str | None, list[int]] = defaultdict(list)
    rng = random.Random(2)

    @broker.subscriber(MemoryStream("s"), workers=3, by_key="tenant")
    async def handle(n: int, ctx: Context) -> None:
        await trio.sleep(rng.random() / 10)
        order[ctx.headers.get("tenant")].append(n)

    async with app.test() as t:
        for n in range(300):
            await broker.publish("s", n, headers={"tenant": f"t{n % 5}"})
        await t.settled()
    assert all(ns == sorted(ns) for ns in order.values())
    assert len(order) == 5


async def test_an_undecodable_message_in_a_lane_runs_the_decode_policy() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    handled: list[Event] = []

    @broker.subscriber(MemoryStream("s"), workers=2, by_key=lambda e: e.key, dead_letter="dlq")
    async def handle(event: Event) -> None:
        handled.append(event)

    async with app.test() as t:
        await broker.publish("s", b"not json")
        await broker.publish("s", Event("a", 1))
        await t.settled()
        assert handled == [Event("a", 1)]
        assert [m.payload for m in t.published("dlq")] == [b"not json"]


async def test_batches_fill_up_or_flush_after_max_wait(autojump_clock: trio.abc.Clock) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    batches: list[list[int]] = []

    @broker.subscriber(MemoryStream("s"), batch=4, max_wait=2.0)
    async def handle(numbers: list[int]) -> None:
        batches.append(numbers)

    async with app.test() as t:
        for n in range(6):
            await broker.publish("s", n)
        start = trio.current_time()
        await t.wait(0)  # the first four fill a batch at once; the other two wait max_wait
        assert batches[0] == [0, 1, 2, 3]
        await t.settled()
        assert trio.current_time() - start >= 2.0
    assert batches == [[0, 1, 2, 3], [4, 5]]


async def test_batch_handlers_answer_per_element(autojump_clock: trio.abc.Clock) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    calls: list[tuple[list[int], list[int]]] = []

    @broker.subscriber(MemoryStream("s"), batch=3, max_wait=0.5, max_attempts=2)
    async def handle(numbers: list[int], contexts: list[Context]) -> list[object]:
        calls.append((numbers, [c.attempt for c in contexts]))
        return [ack() if n != 1 else retry() for n in numbers]

    async with app.test() as t:
        for n in range(3):
            await broker.publish("s", n)
        await t.settled()
        record = t.handler(handle)
        assert record.outcomes == [ack(), retry(), ack(), retry()]
        assert record.settled == [ack(), retry(), ack(), drop()]
    assert calls == [([0, 1, 2], [1, 1, 1]), ([1], [2])]


async def test_a_batch_handler_returning_nonsense_runs_the_failure_policy() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), batch=2, max_wait=0.1, max_attempts=1)
    async def handle(numbers: list[int]) -> object:
        return [ack()]  # one outcome for two messages

    async with app.test() as t:
        await broker.publish("s", 1)
        await broker.publish("s", 2)
        await t.settled()
        record = t.handler(handle)
        assert record.settled == [drop(), drop()]
        assert "returned 1 outcomes for 2 messages" in str(record.errors[0])


async def test_back_pressure_a_slow_handler_stops_the_driver() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    release = trio.Event()
    handled = 0

    @broker.subscriber(MemoryStream("s"), buffer=8, count=4, name="slow")
    async def handle(n: int) -> None:
        nonlocal handled
        await release.wait()
        handled += 1

    async with serving(app) as running:
        for n in range(1000):
            await broker.publish("s", n)
        await trio.testing.wait_all_tasks_blocked()
        stats = running.stats()["slow"]
        # One in the handler, a full channel, and nothing more read from the log.
        assert stats.queued == stats.capacity == 8
        assert stats.outstanding == 9
        assert stats.held <= 4  # the rest of one read, no more
        assert stats.unread + stats.held + stats.outstanding == 1000
        for _ in range(100):
            await broker.publish("s", 0)
        await trio.testing.wait_all_tasks_blocked()
        assert running.stats()["slow"].outstanding == 9  # flat while the handler is stuck
        release.set()
        with trio.fail_after(10):
            while running.stats()["slow"].unread or running.stats()["slow"].outstanding:
                await trio.testing.wait_all_tasks_blocked()
    assert handled == 1100
