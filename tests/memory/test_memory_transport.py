"""The in-process transport: retained logs, live and replay, groups, fan-out, refusals."""

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import (
    RETRY_TARGET_HEADER,
    App,
    ConfigurationError,
    Context,
    MemoryBroker,
    MemoryStream,
    Outcome,
    Position,
    UnsupportedError,
    ack,
    retry,
)
from trio_streams.memory.log import MemoryHub


def test_sequences_count_from_one_per_stream() -> None:
    hub = MemoryHub()
    assert [hub.append(s, b"", {}).seq for s in "aabab"] == [1, 2, 1, 3, 2]


def test_retention_trims_the_oldest_and_keeps_sequences() -> None:
    hub = MemoryHub(max_len=100)
    for n in range(1000):
        hub.append("s", str(n).encode(), {})
    log = hub.log("s")
    assert log.next_seq == 1001
    assert log.first_seq > 1 and len(log) <= 100 + 100 // 4 + 64
    assert log.get(1000).payload == b"999"


async def test_a_live_subscription_starts_at_the_tip() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    broker.hub.append("s", b"1", {})
    seen: list[int] = []
    handled = trio.Event()

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None:
        seen.append(n)
        handled.set()

    async with serving(app):
        await broker.publish("s", 2)
        with trio.fail_after(5):
            await handled.wait()
    assert seen == [2]


async def test_a_replay_reads_from_the_beginning_and_ends_at_the_tip() -> None:
    app = App("job")
    broker = app.broker(MemoryBroker())
    for n in range(5):
        broker.hub.append("s", str(n).encode(), {})
    seen: list[int] = []

    @broker.subscriber(MemoryStream("s").replay(), name="replay")
    async def handle(n: int) -> None:
        seen.append(n)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_finished()
            assert running.stats()["replay"].state.value == "ended"
    assert seen == [0, 1, 2, 3, 4]


async def test_a_replay_never_ends_while_a_retry_is_outstanding() -> None:
    app = App("job")
    broker = app.broker(MemoryBroker())
    broker.hub.append("s", b"1", {})
    attempts: list[int] = []

    @broker.subscriber(MemoryStream("s").replay(), max_attempts=3)
    async def handle(n: int, ctx: Context) -> object:
        attempts.append(ctx.attempt)
        return retry() if ctx.attempt < 3 else None

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()
    assert attempts == [1, 2, 3]


async def test_start_at_a_position() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    for n in range(10):
        broker.hub.append("s", str(n).encode(), {})
    seen: list[int] = []

    @broker.subscriber(MemoryStream("s", start_at=Position.sequence(8)))
    async def handle(n: int) -> None:
        seen.append(n)

    async with serving(app):
        await broker.publish("s", 10)
        with trio.fail_after(5):
            while len(seen) < 4:
                await trio.testing.wait_all_tasks_blocked()
    assert seen == [7, 8, 9, 10]  # sequence 8 holds the eighth message, 7


async def test_fan_out_subscriptions_each_get_every_message() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    a: list[int] = []
    b: list[int] = []

    @broker.subscriber(MemoryStream("s"))
    async def first(n: int) -> None:
        a.append(n)

    @broker.subscriber(MemoryStream("s"))
    async def second(n: int) -> None:
        b.append(n)

    async with app.test() as t:
        for n in range(5):
            await t.publish("s", n)
    assert a == b == [0, 1, 2, 3, 4]


async def test_a_consumer_group_gives_each_message_to_one_member(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    got: dict[str, list[int]] = {"a": [], "b": []}

    @broker.subscriber(MemoryStream("jobs", group="workers"), count=1)
    async def member_a(n: int) -> None:
        await trio.sleep(1)
        got["a"].append(n)

    @broker.subscriber(MemoryStream("jobs", group="workers"), count=1)
    async def member_b(n: int) -> None:
        await trio.sleep(1)
        got["b"].append(n)

    async with app.test() as t:
        for n in range(20):
            await broker.publish("jobs", n)
        await t.settled()
    assert sorted(got["a"] + got["b"]) == list(range(20))
    assert got["a"] and got["b"]


async def test_a_group_retry_is_redelivered_to_a_member() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    attempts: list[int] = []

    @broker.subscriber(MemoryStream("jobs", group="g"), max_attempts=2)
    async def handle(n: int, ctx: Context) -> object:
        attempts.append(ctx.attempt)
        return retry()

    async with app.test() as t:
        await t.publish("jobs", 1)
    assert attempts == [1, 2]


async def test_groups_and_fan_out_side_by_side() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    group: list[int] = []
    fan: list[int] = []

    @broker.subscriber(MemoryStream("s", group="g"))
    async def in_group(n: int) -> None:
        group.append(n)

    @broker.subscriber(MemoryStream("s"))
    async def everyone(n: int) -> None:
        fan.append(n)

    async with app.test() as t:
        for n in range(4):
            await t.publish("s", n)
    assert group == fan == [0, 1, 2, 3]


async def test_several_streams_are_read_in_publish_order() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    seen: list[tuple[str, int]] = []

    @broker.subscriber(MemoryStream("a", "b"))
    async def handle(n: int, ctx: Context) -> None:
        seen.append((ctx.stream, n))

    async with app.test() as t:
        for stream, n in [("a", 1), ("b", 2), ("a", 3), ("c", 9), ("b", 4)]:
            await t.publish(stream, n, unread_ok=True)  # nothing reads "c"
    assert seen == [("a", 1), ("b", 2), ("a", 3), ("b", 4)]


def test_the_memory_broker_refuses_sources_and_options_it_cannot_serve() -> None:
    from trio_streams.core.transport import Source

    class Other(MemoryStream):
        pass

    broker = MemoryBroker()

    class Alien(Source):
        name = "x"
        streams = ("x",)

        def with_prefix(self, prefix: str) -> "Alien":
            return self

        def in_process(self) -> MemoryStream:
            return MemoryStream("x")

    async def handle(n: int) -> None: ...

    with pytest.raises(UnsupportedError, match="cannot subscribe to"):
        broker.subscriber(Alien())(handle)
    with pytest.raises(UnsupportedError, match="does not understand subscriber option"):
        broker.subscriber(MemoryStream("s"), lease=30)(handle)
    with pytest.raises(ConfigurationError, match="count must be"):
        broker.subscriber(MemoryStream("s"), count=0)(handle)
    broker.subscriber(Other("s"))(handle)  # subclasses are fine


def test_memory_streams_validate_their_names() -> None:
    with pytest.raises(ConfigurationError, match="at least one"):
        MemoryStream()
    with pytest.raises(ConfigurationError, match="repeat"):
        MemoryStream("a", "a")
    with pytest.raises(ConfigurationError, match="non-empty"):
        MemoryStream("")
    assert repr(MemoryStream("a", group="g").replay()) == "MemoryStream('a', group='g').replay()"
    assert MemoryStream("a").with_prefix("p.").streams == ("p.a",)


async def test_a_retry_in_a_consumer_group_is_handled_by_whichever_member_reads_the_copy() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    handled: list[tuple[str, int, int]] = []

    def member(name: str) -> None:
        @broker.subscriber(MemoryStream("jobs", group="w"), name=name)
        async def work(n: int, ctx: Context) -> Outcome:
            if ctx.attempt == 1:
                return retry()
            handled.append((name, n, ctx.attempt))
            return ack()

    member("m1")
    member("m2")
    async with app.test() as t:
        await t.publish("jobs", 1)
        await t.publish("jobs", 2)
    assert sorted((n, attempt) for _, n, attempt in handled) == [(1, 2), (2, 2)]
    copies = [m for m in t.published("jobs") if RETRY_TARGET_HEADER in m.headers]
    assert {m.headers[RETRY_TARGET_HEADER] for m in copies} == {"group:w"}
