"""The delivery hot path keeps every promise of the general one: workers take runs of queued
deliveries but pass a schedule point every run; an ack is skipped only where the source says it
settles nothing, never where a settle is needed; positions built when first read equal eager ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_streams import App, Context, MemoryBroker, MemoryStream
from trio_streams.core.delivery import Delivery, SequenceDelivery
from trio_streams.core.dispatch import RUN
from trio_streams.core.outcome import Outcome, retry
from trio_streams.core.positions import Position, delivered_position
from trio_streams.core.subscription import SubscriptionRunner
from trio_streams.core.transport import SourceFault, SubscriptionSource
from trio_streams.file import FileBroker, FileStream
from trio_streams.memory.broker import MemorySubscription
from trio_streams.redis.group import GroupSubscription

from .test_source_host import Script, publish_one_and_stop, scripted_app

# ---- positions built when first read -----------------------------------------------------------


def test_a_sequence_delivery_sets_every_slot_a_delivery_has() -> None:
    lazy = SequenceDelivery("s", b"body", {"k": "v"}, 7, 2, 3, 1234, handle="h")
    eager = Delivery(
        "s", b"body", {"k": "v"}, position=delivered_position(7, "s", 2), attempt=3, handle="h",
        timestamp_ms=1234,
    )  # fmt: skip
    for slot in Delivery.__slots__:
        assert getattr(lazy, slot) == getattr(eager, slot), slot


def test_its_position_is_the_sequences_and_reads_the_same_each_time() -> None:
    delivery = SequenceDelivery("s", b"", {}, 7, None, 1, None)
    assert delivery.position == Position.sequence(7, stream="s")
    assert delivery.position is delivery.position
    assert "Position.sequence(7" in repr(delivery)


def test_a_position_set_on_it_is_what_it_holds() -> None:
    delivery = SequenceDelivery("s", b"", {}, 7, None, 1, None)
    delivery.position = Position.sequence(1, stream="s")
    assert delivery.position == Position.sequence(1, stream="s")


# ---- runs of deliveries, with a schedule point every run --------------------------------------


async def _largest_gap_between_other_tasks_turns(handler_kind: str) -> tuple[int, int]:
    """Queue a backlog, handle it with a handler that never yields, and count how many
    deliveries were handled between two turns of another task: (largest gap, handled)."""
    app = App("svc")
    broker = app.broker(MemoryBroker())
    total = 20 * RUN
    for n in range(total):
        broker.hub.append("s", str(n).encode(), {})
    handled = 0
    done = trio.Event()

    def count() -> None:
        nonlocal handled
        handled += 1
        if handled == total:
            done.set()

    if handler_kind == "payload":

        @broker.subscriber(MemoryStream("s").replay(), count=total, buffer=total)
        async def payload_only(n: int) -> None:
            count()

    else:

        @broker.subscriber(MemoryStream("s").replay(), count=total, buffer=total)
        async def with_context(n: int, ctx: Context) -> None:
            count()

    gaps = []

    async def other_task() -> None:
        last = handled
        while not done.is_set():
            await trio.lowlevel.checkpoint()
            gaps.append(handled - last)
            last = handled

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        nursery.start_soon(other_task)
        await done.wait()
        await running.aclose()
    return max(gaps), handled


async def test_a_worker_handling_a_backlog_passes_a_schedule_point_every_run() -> None:
    # A worker runs at most once per scheduler batch, and the other task once too: between two
    # of its turns the worker may have had two runs, never more.
    gap, handled = await _largest_gap_between_other_tasks_turns("payload")
    assert handled == 20 * RUN
    assert gap <= 2 * RUN


async def test_a_worker_of_a_handler_with_more_parameters_also_yields_every_run() -> None:
    gap, handled = await _largest_gap_between_other_tasks_turns("context")
    assert handled == 20 * RUN
    assert gap <= 2 * RUN


async def test_a_run_cut_short_by_shutdown_ends_every_delivery_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    app, broker = scripted_app(script)
    app.shutdown_timeout = 1
    for n in range(10):
        broker.hub.append("s", str(n).encode(), {})
    stuck = trio.Event()

    @broker.subscriber(MemoryStream("s").replay(), name="sub", buffer=16)
    async def handle(n: int) -> None:
        if n == 5:
            stuck.set()
            await trio.sleep_forever()

    await publish_one_and_stop(app, broker, stuck)
    endings = script.endings()  # each delivery read ended exactly once
    assert endings["ack"] == 5
    assert endings.get("abandoned", 0) == len(script.read_out) - 5


# ---- acks that settle nothing ------------------------------------------------------------------


async def _runner_of(app: App, nursery: trio.Nursery) -> tuple[Any, SubscriptionRunner]:
    running = await nursery.start(app.serve)
    return running, running._runners[0]


async def test_a_replayed_file_without_a_durable_consumer_says_its_acks_settle_nothing(
    tmp_path: Path,
) -> None:
    app = App("svc")
    broker = app.broker(FileBroker(tmp_path / "s.ss"))

    @broker.subscriber(FileStream("k"))
    async def handle(payload: bytes) -> None: ...

    async with trio.open_nursery() as nursery:
        running, runner = await _runner_of(app, nursery)
        assert runner.source.acks_are_noops
        await running.aclose()


async def test_a_durable_file_consumer_still_settles_every_ack(tmp_path: Path) -> None:
    app = App("svc")
    broker = app.broker(FileBroker(tmp_path / "s.ss"))

    @broker.subscriber(FileStream("k", durable="c"))
    async def handle(payload: bytes) -> None: ...

    async with trio.open_nursery() as nursery:
        running, runner = await _runner_of(app, nursery)
        assert not runner.source.acks_are_noops  # its watermark moves at each settle
        await running.aclose()


async def test_an_in_process_stream_with_a_window_still_settles_every_ack() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), name="windowed", pipeline=True)
    async def windowed(payload: bytes) -> None: ...

    @broker.subscriber(MemoryStream("s"), name="plain")
    async def plain(payload: bytes) -> None: ...

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        by_name = {r.label: r for r in running._runners}
        assert not by_name["windowed"].source.acks_are_noops  # its window keeps the segment
        assert by_name["plain"].source.acks_are_noops
        await running.aclose()


def test_a_source_that_keeps_per_delivery_state_keeps_the_default() -> None:
    assert GroupSubscription.acks_are_noops is SubscriptionSource.acks_are_noops


async def test_a_source_whose_settle_is_overridden_is_settled_for_every_ack() -> None:
    script = Script()  # a MemorySubscription whose settle records
    app, broker = scripted_app(script)
    handled = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="sub")
    async def handle(n: int) -> None:
        handled.set()

    await publish_one_and_stop(app, broker, handled)
    assert script.endings() == {"ack": 1}


async def test_a_settle_replaced_on_a_running_source_is_called_for_the_next_ack() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    settled: list[str] = []
    handled = trio.Event()

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None:
        handled.set()

    async with trio.open_nursery() as nursery:
        running, runner = await _runner_of(app, nursery)
        source = runner.source
        original = source.settle

        async def recording(delivery: Delivery, outcome: Outcome) -> None:
            settled.append(outcome.kind.value)
            await original(delivery, outcome)

        source.settle = recording  # type: ignore[method-assign]
        assert not source.acks_are_noops
        await running.publish(broker, "s", 1)
        await handled.wait()
        await running.aclose()
    assert settled == ["ack"]


async def test_a_retry_is_settled_where_acks_settle_nothing() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    calls: list[int] = []
    done = trio.Event()

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> Outcome | None:
        calls.append(n)
        if len(calls) == 1:
            return retry()
        done.set()
        return None

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await running.publish(broker, "s", 1)
        await done.wait()
        await running.aclose()
    assert calls == [1, 1]  # the retry copy was appended: settled, not skipped
    assert len(broker.hub.log("s")) == 2


async def test_a_settle_fault_lasts_through_acks_that_settle_nothing_and_clears_at_a_settle() -> (
    None
):
    app = App("svc")
    broker = app.broker(MemoryBroker())
    acked, copied = trio.Event(), trio.Event()

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int, ctx: Context) -> Outcome | None:
        if n == 1:
            acked.set()
            return None  # an ack that settles nothing: it says nothing of the transport
        if ctx.attempt == 1:
            return retry()  # a copy is written: a settle that succeeded
        copied.set()  # the copy
        return None

    async with trio.open_nursery() as nursery:
        running, runner = await _runner_of(app, nursery)
        assert runner.source.acks_are_noops
        runner._settle_failed(SourceFault("settle", "the last settle was not sent"))
        assert runner.host is not None and "settle" in runner.host.active
        await running.publish(broker, "s", 1)
        await acked.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert "settle" in runner.host.active
        await running.publish(broker, "s", 2)
        await copied.wait()
        assert "settle" not in runner.host.active
        await running.aclose()


def test_the_in_process_subscription_speaks_for_its_own_settle_only() -> None:
    class Wrapped(MemorySubscription):
        async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
            await super().settle(delivery, outcome)

    hub = MemoryBroker().hub
    plain = MemorySubscription(hub, MemoryStream("s"), label="a", count=1)
    wrapped = Wrapped(hub, MemoryStream("s"), label="b", count=1)
    assert plain.acks_are_noops
    assert not wrapped.acks_are_noops


@dataclass
class Fragile:
    x: int

    def __post_init__(self) -> None:
        if self.x == 1:
            raise RuntimeError("constructor failed")


@pytest.mark.parametrize("shape", ["in line", "general", "lanes"])
async def test_a_payload_constructor_that_raises_runs_the_failure_policy_in_every_shape(
    shape: str,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    handled: list[int] = []
    options: dict[str, Any] = {"max_attempts": 2, "dead_letter": "dlq"}
    if shape == "lanes":
        options.update(workers=2, by_key=lambda f: f.x)

    if shape == "general":

        @broker.subscriber(MemoryStream("s"), name="sub", **options)
        async def handle_with_context(f: Fragile, ctx: Context) -> None:
            handled.append(f.x)

    else:

        @broker.subscriber(MemoryStream("s"), name="sub", **options)
        async def handle(f: Fragile) -> None:
            handled.append(f.x)

    async with app.test() as t:
        await t.publish("s", {"x": 1})  # its constructor raises: retried, then dead-lettered
        await t.publish("s", {"x": 2})
        letters = t.published("dlq")
    assert handled == [2]  # the app goes on
    [letter] = letters
    assert letter.headers["x-dead-letter-error"] == "RuntimeError: constructor failed"
