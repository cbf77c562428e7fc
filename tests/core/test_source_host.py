"""What the core gives a transport source: an async open step, tasks it owns, faults that do not
stop the app, the core's options, and the attempts cap checked before the handler.

Each test is named after the sentence it proves. Sources are the in-process ones with a
behaviour added on top, so every test runs real subscriptions through ``App.serve``.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_streams import App, AppFailed, Context, HealthState, MemoryBroker, MemoryStream, Position
from trio_streams.core.delivery import RETRY_COUNT_HEADER, Delivery
from trio_streams.core.host import Fault, SubscriptionHost
from trio_streams.core.outcome import Outcome, retry_after
from trio_streams.core.subscription import SubscriptionStats
from trio_streams.core.transport import (
    DEAD_LETTER_HEADERS,
    DeadLetter,
    Source,
    SourceFault,
    Unsettled,
)
from trio_streams.memory.broker import MemorySubscription, MemoryTransport

Behaviour = Callable[["Scripted"], None]


class Scripted(MemorySubscription):
    """An in-process subscription whose open, read, settle and close tests can script."""

    def __init__(self, *args: Any, script: Script, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.script = script
        self.host: SubscriptionHost | None = None

    async def open(self, host: SubscriptionHost) -> None:
        self.host = host
        self.script.events.append("open")
        await self.script.on_open(self, host)

    async def read(self) -> Sequence[Delivery] | None:
        self.script.reads += 1
        if self.script.read_fault_kinds:
            raise SourceFault(self.script.read_fault_kinds.pop(0), "the server went away")
        if self.script.read_faults:
            self.script.read_faults -= 1
            raise SourceFault("connection", "the server went away")
        return self.script.handed_out(await super().read())

    def poll(self) -> Sequence[Delivery]:
        if self.script.read_faults or self.script.read_fault_kinds:
            return ()
        batch = super().poll()
        self.script.handed_out(batch)
        return batch

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        self.script.ends.append((id(delivery), outcome.kind.value))
        if self.script.settle_fault_kinds:
            raise SourceFault(self.script.settle_fault_kinds.pop(0), "not sent")
        if self.script.settle_faults:
            self.script.settle_faults -= 1
            raise SourceFault("settle", "the acknowledgement was not sent")
        self.script.settled.append(delivery.payload)
        await super().settle(delivery, outcome)

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        self.script.ends.append((id(delivery), why.value))

    async def aclose(self) -> None:
        self.script.events.append("aclose")
        await super().aclose()
        if self.script.close_fault:
            raise SourceFault("close", "the last flush failed")


class Script:
    def __init__(self) -> None:
        self.events: list[str] = []
        self.reads = 0
        self.read_faults = 0
        self.settle_faults = 0
        #: Kinds of the faults the next reads / settles raise, one each, in order.
        self.read_fault_kinds: list[str] = []
        self.settle_fault_kinds: list[str] = []
        self.close_fault = False
        self.settled: list[bytes] = []
        self.hosts: list[SubscriptionHost] = []
        #: Every delivery read, and how each ended: (id, outcome kind or Unsettled value).
        self.read_out: list[Delivery] = []
        self.ends: list[tuple[int, str]] = []

    def handed_out(self, batch: Sequence[Delivery] | None) -> Sequence[Delivery] | None:
        if batch:
            self.read_out.extend(batch)
        return batch

    def endings(self) -> dict[str, int]:
        """How the deliveries read ended, by kind; asserts each ended exactly once."""
        ids = [id(d) for d in self.read_out]
        ended = [i for i, _ in self.ends]
        assert sorted(ended) == sorted(ids), "a delivery ended twice, or never"
        counts: dict[str, int] = {}
        for _, how in self.ends:
            counts[how] = counts.get(how, 0) + 1
        return counts

    async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
        self.hosts.append(host)
        await trio.lowlevel.checkpoint()


class ScriptedBroker(MemoryBroker):
    def __init__(self, script: Script) -> None:
        super().__init__()
        self.script = script

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[MemoryTransport]:
        script = self.script

        class Transport(MemoryTransport):
            def open_subscription(
                self, source: Source, options: Mapping[str, Any], *, label: str
            ) -> Scripted:
                stream = source.in_process()
                return Scripted(self.hub, stream, label=label, count=4, script=script)

        yield Transport(self.hub)


def scripted_app(script: Script, *, name: str = "svc") -> tuple[App, ScriptedBroker]:
    app = App(name)
    return app, app.broker(ScriptedBroker(script))


# ---- 1. "A typed way for a source to report a fault that is recovered or recoverable: it is
# logged once, counted in the subscription's stats, delivered to observers, visible in
# app.test(), and moves health to a degraded state while it lasts (back to running when it
# clears). Fatal errors still fail the app, as now."


async def test_a_reported_fault_degrades_health_while_it_lasts_and_clears_back_to_running(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    script = Script()
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        host = script.hosts[0]
        assert health_of(app) is HealthState.RUNNING
        host.report_fault("connection", "reconnecting to 127.0.0.1:1")
        host.report_fault("connection", "reconnecting to 127.0.0.1:1")  # still the same fault
        assert health_of(app) is HealthState.DEGRADED
        assert "sub: connection: reconnecting" in str(app.health.value)
        assert app.health.value.ok  # degraded still serves
        stats = running.stats()["sub"]
        assert stats.faults == 2 and stats.degraded == ("connection",)
        host.clear_fault("connection")
        assert health_of(app) is HealthState.RUNNING
        assert running.stats()["sub"].degraded == ()
        await running.aclose()
    began = [r for r in caplog.records if "fault 'connection'" in r.getMessage()]
    assert [r.levelno for r in began] == [logging.WARNING, logging.INFO]  # once, then cleared


async def test_faults_are_visible_in_app_test() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    async with app.test() as t:
        t.report_fault("sub", "connection", "reconnecting")
        assert health_of(app) is HealthState.DEGRADED
        assert t.running.stats()["sub"].degraded == ("connection",)
        t.clear_fault(_noop, "connection")
        assert health_of(app) is HealthState.RUNNING
    assert [(f.subscription, f.kind, f.cleared) for f in t.faults] == [
        ("sub", "connection", False),
        ("sub", "connection", True),
    ]


async def test_faults_reach_fault_observers_in_order() -> None:
    script = Script()
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    seen: list[Fault] = []
    from trio_streams.core.app import RunOptions, connect_broker

    options = RunOptions(connect=connect_broker, shutdown_timeout=5, fault_observers=(seen.append,))
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve_with, options)
        script.hosts[0].report_fault("gap", "3 messages missed")
        script.hosts[0].clear_fault("gap")
        await running.aclose()
    assert [(f.kind, f.cleared) for f in seen] == [("gap", False), ("gap", True)]


async def test_a_fault_raised_from_read_does_not_stop_the_app_and_clears_on_the_next_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    script.read_faults = 12
    app, broker = scripted_app(script)
    got: list[int] = []
    done = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="sub")
    async def handle(n: int) -> None:
        got.append(n)
        done.set()

    healths: list[HealthState] = []
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        start = trio.current_time()
        await broker.publish("s", 1)
        with trio.fail_after(60):
            await done.wait()
        healths.append(app.health.value.state)
        elapsed = trio.current_time() - start
        stats = running.stats()["sub"]
        await running.aclose()
    assert got == [1]
    assert healths == [HealthState.RUNNING]  # cleared by the read that succeeded
    assert stats.faults == 12 and stats.degraded == ()
    # Paced, never a busy loop: 1 + 2 + 4 + ... ms, capped at 1 s per pause.
    assert script.reads <= 14
    assert elapsed >= 1.0


async def test_a_fault_raised_from_settle_is_reported_and_clears_at_the_next_settle() -> None:
    script = Script()
    script.settle_faults = 1
    app, broker = scripted_app(script)
    handled = trio.Event()
    count = 0

    @broker.subscriber(MemoryStream("s"), name="sub")
    async def handle(n: int) -> None:
        nonlocal count
        count += 1
        if count == 2:
            handled.set()

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("s", 1)
        await broker.publish("s", 2)
        with trio.fail_after(10):
            await handled.wait()
        for _ in range(5):
            await trio.lowlevel.checkpoint()  # the second settle follows its handler
        stats = running.stats()["sub"]
        health = app.health.value.state
        await running.aclose()
    assert stats.faults == 1 and stats.degraded == ()
    assert health is HealthState.RUNNING
    assert script.settled == [b"2"]  # the first stays with the transport, to deliver again


async def test_a_fault_raised_from_aclose_is_reported_not_raised() -> None:
    script = Script()
    script.close_fault = True
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await running.aclose()
    assert health_of(app) is HealthState.STOPPED
    assert script.hosts[0].count == 1


async def test_any_other_exception_from_read_still_fails_the_app() -> None:
    class Broken(Script):
        async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
            await super().on_open(source, host)

            async def boom() -> Sequence[Delivery] | None:
                raise OSError("disk on fire")

            source.read = boom  # type: ignore[method-assign]

    app, broker = scripted_app(Broken())
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    await serve_until_it_fails(app, "disk on fire")


# ---- 3. "An async open step and tasks the subscription owns ... their failure fails serve's
# start, not a running app ... cancelled after the dispatcher drains and before aclose."


async def test_open_runs_before_the_app_reports_started() -> None:
    script = Script()
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        assert script.events == ["open"]
        await running.aclose()
    assert script.events == ["open", "aclose"]


async def test_a_failing_open_fails_serves_start_and_the_source_is_still_closed() -> None:
    class Refusing(Script):
        async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
            raise OSError("NOGROUP and cannot create it")

    script = Refusing()
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    started = False
    with pytest.RaisesGroup(pytest.RaisesExc(OSError, match="NOGROUP"), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
            started = True
    assert not started
    assert script.events == ["open", "aclose"]
    assert health_of(app) is HealthState.FAILED


async def test_tasks_a_source_starts_run_until_the_dispatcher_drains_then_stop_before_aclose() -> (
    None
):
    events: list[str] = []
    handler_running = trio.Event()
    release = trio.Event()

    class Heartbeat(Script):
        async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
            async def beat() -> None:
                events.append("beat started")
                try:
                    await trio.sleep_forever()
                finally:
                    events.append("beat cancelled")

            host.start_soon(beat)
            await trio.lowlevel.checkpoint()

    script = Heartbeat()
    script.events = events
    app, broker = scripted_app(script)

    @broker.subscriber(MemoryStream("s"), name="sub")
    async def handle(n: int) -> None:
        handler_running.set()
        await release.wait()
        events.append("handler done")

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("s", 1)
        with trio.fail_after(10):
            await handler_running.wait()
            nursery.start_soon(running.aclose)
            for _ in range(10):
                await trio.lowlevel.checkpoint()
            assert "beat cancelled" not in events  # the drain is not over
            release.set()
            await running.wait_stopped()
    assert events == ["open", "beat started", "handler done", "beat cancelled", "aclose"]


async def test_a_task_of_the_source_that_fails_fails_the_app() -> None:
    class Crashing(Script):
        async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
            async def reaper() -> None:
                await trio.lowlevel.checkpoint()
                raise RuntimeError("reaper crashed")

            host.start_soon(reaper)
            await trio.lowlevel.checkpoint()

    app, broker = scripted_app(Crashing())
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    await serve_until_it_fails(app, "reaper crashed")


# ---- 6. "The transport sees the core's options at open, and the core checks the attempt cap
# before calling the handler."


async def test_the_source_sees_the_cores_options_at_open() -> None:
    script = Script()
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub", workers=3, max_attempts=7, buffer=32)(_noop)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        options = script.hosts[0].options
        await running.aclose()
    assert (options.workers, options.policy.max_attempts, options.channel_capacity) == (3, 7, 32)


@pytest.mark.parametrize("shape", [{}, {"batch": 4}, {"workers": 2, "by_key": "k"}])
async def test_a_delivery_tried_more_than_max_attempts_is_dead_lettered_before_the_handler(
    shape: dict[str, Any],
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    calls: list[Any] = []

    async def handle(n: int) -> None:
        calls.append(n)

    async def handle_batch(ns: list[int]) -> None:
        calls.append(ns)

    broker.subscriber(MemoryStream("s"), name="sub", max_attempts=3, dead_letter="dlq", **shape)(
        handle_batch if "batch" in shape else handle
    )
    async with app.test() as t:
        # A copy that was already tried 3 times (e.g. its handler crashed the process).
        await t.publish("s", 1, headers={RETRY_COUNT_HEADER: "3", "k": "a"})
        await t.publish("s", 2, headers={"k": "a"})
        assert [m.payload for m in t.published("dlq")] == [b"1"]
    assert calls in ([2], [[2]])


async def serve_until_it_fails(app: App, match: str) -> None:
    """Serve ``app`` until it stops; it must stop with ``AppFailed`` matching ``match``."""
    with trio.fail_after(10), pytest.RaisesGroup(pytest.RaisesExc(AppFailed, match=match)):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()


async def publish_one_and_stop(
    app: App, broker: MemoryBroker, handled: trio.Event
) -> tuple[SubscriptionStats, HealthState]:
    """Serve ``app``, publish 1 to stream ``s``, wait for ``handled``, then stop: the stats of
    subscription ``sub`` and the app's health just before the stop."""
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("s", 1)
        with trio.fail_after(10):
            await handled.wait()
        stats = running.stats()["sub"]
        health = health_of(app)
        await running.aclose()
    return stats, health


def health_of(app: App) -> HealthState:
    """The app's health now (a call, so checks before and after a change both type-check)."""
    state: HealthState = app.health.value.state
    return state


async def _noop(n: int) -> None:
    await trio.lowlevel.checkpoint()


# ---- 2. "The source hears about every delivery that ends without a settle ... stale, purged by
# a seek, or abandoned at shutdown ... synchronously, at each of those sites."


@pytest.mark.parametrize(
    "shape", [{}, {"workers": 4}, {"batch": 3}, {"workers": 3, "by_key": "k"}], ids=str
)
async def test_deliveries_abandoned_at_shutdown_are_reported_each_once(
    shape: dict[str, Any], autojump_clock: trio.testing.MockClock
) -> None:
    script = Script()
    app, broker = scripted_app(script)
    app.shutdown_timeout = 1
    stuck = trio.Event()

    async def handle(n: int) -> None:
        stuck.set()
        await trio.sleep_forever()  # never settles: abandoned when the drain times out

    async def handle_batch(ns: list[int]) -> None:
        await handle(ns[0])

    broker.subscriber(MemoryStream("s"), name="sub", buffer=4, **shape)(
        handle_batch if "batch" in shape else handle
    )
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        for n in range(20):
            await broker.publish("s", n, headers={"k": str(n % 5)})
        with trio.fail_after(10):
            await stuck.wait()
        await running.aclose()
    endings = script.endings()
    assert set(endings) == {"abandoned"}
    assert endings["abandoned"] == len(script.read_out) >= 1


async def test_deliveries_purged_or_made_stale_by_a_seek_are_reported() -> None:
    script = Script()
    app, broker = scripted_app(script)
    seeked = False

    async def handle(n: int, ctx: Context) -> None:
        nonlocal seeked
        if n == 3 and not seeked:
            seeked = True
            await ctx.seeker.seek(Position.sequence(15))

    broker.subscriber(MemoryStream("s").replay(), name="sub", buffer=4, workers=2)(handle)
    for n in range(1, 21):
        broker.hub.append("s", str(n).encode(), {})
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        with trio.fail_after(10):
            await running.wait_stopped()
    endings = script.endings()
    assert endings.get("purged", 0) + endings.get("stale", 0) >= 1
    assert set(endings) <= {"ack", "purged", "stale"}


async def test_a_retry_waiting_out_its_delay_at_shutdown_is_fired_not_left_unsettled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    app, broker = scripted_app(script)
    app.shutdown_timeout = 0.5
    handled = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="sub", max_attempts=5)
    async def handle(n: int) -> Outcome:
        handled.set()
        return retry_after(3600)

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("s", 1)
        with trio.fail_after(10):
            await handled.wait()
        # Shutdown fires due and pending delayed retries at once: settled with retry().
        await running.aclose()
    assert script.endings() == {"retry": 1}


# ---- 5. "Dead letters inside settle: hand the transport the whole verdict (outcome, dead-letter
# destination, reason); keep today's behaviour as the default implementation." And a dead letter
# "carries headers with the reason (exception type and message, attempts, source stream and
# position, time), on every transport."


async def test_a_source_that_dead_letters_in_one_step_gets_the_whole_verdict() -> None:
    letters: list[tuple[bytes, DeadLetter]] = []

    class OneStep(Script):
        async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
            await super().on_open(source, host)

            async def dead_letter(delivery: Delivery, letter: DeadLetter) -> bool:
                letters.append((delivery.payload, letter))
                self.ends.append((id(delivery), "dead-letter"))
                await trio.lowlevel.checkpoint()
                return True

            source.dead_letter = dead_letter  # type: ignore[method-assign]

    script = OneStep()
    app, broker = scripted_app(script)
    done = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="sub", max_attempts=1, dead_letter="dlq")
    async def handle(n: int) -> None:
        done.set()
        raise ValueError(f"bad {n}")

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("s", 7)
        with trio.fail_after(10):
            await done.wait()
        for _ in range(10):
            await trio.lowlevel.checkpoint()
        await running.aclose()
    [(payload, letter)] = letters
    assert payload == b"7"
    assert (letter.destination, letter.reason, letter.error, letter.attempts) == (
        "dlq",
        "max-attempts",
        "ValueError: bad 7",
        1,
    )
    assert broker.hub.log("dlq").next_seq == 1  # the core published nothing itself
    assert script.endings() == {"dead-letter": 1}  # and settled nothing besides


@pytest.mark.parametrize("transport", ["in-process", "file"])
async def test_a_dead_letter_says_why_on_every_transport(
    transport: str, tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    from trio_streams.file import FileBroker, FileStream
    from trio_streams.file.envelope import open_envelope
    from trio_streams.file.reader import FileReader

    app = App("svc")
    path = tmp_path / "orders.ss"
    broker = app.broker(FileBroker(path))
    calls = 0
    second_call = trio.Event()

    @broker.subscriber(
        FileStream("orders"), name="charge", max_attempts=2, dead_letter="orders.dead"
    )
    async def charge(n: int) -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            second_call.set()
        raise ConnectionError("payment service down")

    if transport == "in-process":
        async with app.test() as t:
            await t.publish("orders", 5, headers={"trace": "t1"})
            [letter] = t.published("orders.dead")
            headers = dict(letter.headers)
    else:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await broker.publish("orders", 5, headers={"trace": "t1"})
            with trio.fail_after(30):
                await second_call.wait()
            await running.aclose()  # drains: the second failure is dead-lettered first
        with FileReader(path, keys=["orders.dead"]) as reader:
            [message] = list(reader)
        _, opened = open_envelope(message.payload)
        headers = dict(opened)
    assert headers["trace"] == "t1"
    assert headers["x-dead-letter-reason"] == "max-attempts"
    assert headers["x-dead-letter-error"] == "ConnectionError: payment service down"
    assert headers["x-dead-letter-attempts"] == "2"
    assert headers["x-dead-letter-stream"] == "orders"
    assert headers["x-dead-letter-position"] == "sequence:2"
    assert headers["x-dead-letter-subscription"] == "charge"
    assert set(DEAD_LETTER_HEADERS) <= set(headers)


async def test_a_reader_that_fails_to_close_fails_the_app_without_hanging_its_shutdown() -> None:
    class BadClose(Script):
        async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
            await super().on_open(source, host)

            async def aclose() -> None:
                await trio.lowlevel.checkpoint()
                raise RuntimeError("fatal close")

            source.aclose = aclose  # type: ignore[method-assign]

    app, broker = scripted_app(BadClose())
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    from trio_streams import AppFailed

    with (
        trio.fail_after(10),
        pytest.RaisesGroup(
            pytest.RaisesExc(AppFailed, match="fatal close"), flatten_subgroups=True
        ),
    ):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.aclose()
    assert health_of(app) is HealthState.FAILED


async def test_a_settle_cut_short_by_shutdown_still_ends_the_delivery_once(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class SlowSettle(Script):
        async def on_open(self, source: Scripted, host: SubscriptionHost) -> None:
            await super().on_open(source, host)
            original = source.settle

            async def settle(delivery: Delivery, outcome: Outcome) -> None:
                await original(delivery, outcome)
                await trio.sleep_forever()  # an acknowledgement that never completes

            source.settle = settle  # type: ignore[method-assign]

    script = SlowSettle()
    app, broker = scripted_app(script)
    app.shutdown_timeout = 1
    handled = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="sub")
    async def handle(n: int) -> None:
        handled.set()

    await publish_one_and_stop(app, broker, handled)
    assert script.endings() == {"ack": 1}  # settled (cut short), never also "abandoned"


# ---- "A retry_after whose delay the core holds": the source hears the real outcome when the
# delay is scheduled, then settles with retry() once it has passed.


async def test_a_source_hears_a_retry_after_the_core_holds_when_the_delay_is_scheduled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    heard: list[tuple[str, float, float]] = []

    class Deferring(Scripted):
        def deferred(self, delivery: Delivery, outcome: Outcome) -> None:
            heard.append((outcome.kind.value, outcome.delay, trio.current_time()))

    class DeferringBroker(ScriptedBroker):
        @asynccontextmanager
        async def connect(self) -> AsyncIterator[MemoryTransport]:
            class Transport(MemoryTransport):
                def open_subscription(
                    self, source: Source, options: Mapping[str, Any], *, label: str
                ) -> Scripted:
                    stream = source.in_process()
                    return Deferring(self.hub, stream, label=label, count=4, script=script)

            yield Transport(self.hub)

    app = App("svc")
    broker = app.broker(DeferringBroker(script))
    attempts: list[int] = []
    second = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="sub")
    async def handle(n: int, ctx: Context) -> Outcome | None:
        attempts.append(ctx.attempt)
        if len(attempts) == 1:
            return retry_after(30)
        second.set()
        return None

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        start = trio.current_time()
        await broker.publish("s", 1)
        with trio.fail_after(120):
            await second.wait()
        await running.aclose()
    [(kind, delay, when)] = heard
    assert (kind, delay) == ("retry_after", 30)
    assert when - start < 30  # told when scheduled, not when the delay ended
    # Then the delay passed and the copy was settled with retry(), as before.
    assert [how for _, how in script.ends][:1] == ["retry"]
    assert attempts == [1, 2]


async def test_a_retry_after_decides_its_window_segment_as_retry_after_when_the_handler_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), pipeline=True, name="sub")
    async def handle(n: int, ctx: Context) -> Outcome | None:
        ctx.pipeline.command("INCR", f"n:{ctx.attempt}")
        return retry_after(60) if ctx.attempt == 1 else None

    async with app.test() as t:
        await broker.publish("s", 1)
        await trio.sleep(1)  # the handler has returned; the delay is far from over
        assert [(s.commands, s.kept, s.decided_by) for s in t.segments(handle)] == [
            ((("INCR", "n:1"),), False, "retry_after")
        ]
        await t.wait(60)
        assert [(s.commands, s.kept, s.decided_by) for s in t.segments(handle)] == [
            ((("INCR", "n:1"),), False, "retry_after"),
            ((("INCR", "n:2"),), True, "ack"),
        ]


# ---- "Size the channel sensibly against the transport's read count": a read count the source
# learns only in open() still sizes the channel.


async def test_a_read_count_a_source_sets_in_open_sizes_the_delivery_channel() -> None:
    script = Script()

    async def learn_count(source: Scripted, host: SubscriptionHost) -> None:
        source.read_count = 100  # e.g. asked of the server at open
        await trio.lowlevel.checkpoint()

    script.on_open = learn_count  # type: ignore[method-assign]
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub")(_noop)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        [stats] = running.stats().values()
        await running.aclose()
    assert stats.capacity == 100


async def test_a_buffer_the_user_set_is_kept_whatever_read_count_open_sets() -> None:
    script = Script()

    async def learn_count(source: Scripted, host: SubscriptionHost) -> None:
        source.read_count = 100
        await trio.lowlevel.checkpoint()

    script.on_open = learn_count  # type: ignore[method-assign]
    app, broker = scripted_app(script)
    broker.subscriber(MemoryStream("s"), name="sub", buffer=8)(_noop)
    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        [stats] = running.stats().values()
        await running.aclose()
    assert stats.capacity == 8


# ---- faults of several kinds: "a read that raised clears at the next successful read; a settle
# that raised clears at the next successful settle" — whatever kinds the failures had.


async def test_read_faults_of_several_kinds_all_clear_at_the_next_good_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    script = Script()
    script.read_fault_kinds = ["connection", "auth"]
    app, broker = scripted_app(script)
    handled = trio.Event()

    @broker.subscriber(MemoryStream("s"), name="sub")
    async def handle(n: int) -> None:
        handled.set()

    stats, health = await publish_one_and_stop(app, broker, handled)
    assert (stats.faults, stats.degraded) == (2, ())
    assert health is HealthState.RUNNING


@pytest.mark.parametrize("where", ["settle", "dead_letter"])
async def test_settle_and_dead_letter_faults_of_several_kinds_all_clear_at_the_next_success(
    where: str,
) -> None:
    script = Script()
    app, broker = scripted_app(script)
    failing = ["ack", "connection"]
    done = trio.Event()

    if where == "settle":
        script.settle_fault_kinds = list(failing)

    @broker.subscriber(MemoryStream("s"), name="sub", workers=2, max_attempts=1, dead_letter="dl")
    async def handle(n: int) -> None:
        if n == 3:
            done.set()
        if where == "dead_letter" and n < 3:
            raise ValueError("to the dead letter")

    original = Scripted.dead_letter

    async def dead_letter(self: Scripted, delivery: Delivery, letter: DeadLetter) -> bool:
        if where == "dead_letter" and failing:
            raise SourceFault(failing.pop(0), "not written")
        return await original(self, delivery, letter)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Scripted, "dead_letter", dead_letter)
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await broker.publish("s", 1)
            await broker.publish("s", 2)
            await trio.testing.wait_all_tasks_blocked()
            degraded = running.stats()["sub"].degraded
            await broker.publish("s", 3)
            with trio.fail_after(10):
                await done.wait()
            await trio.testing.wait_all_tasks_blocked()
            stats = running.stats()["sub"]
            health = app.health.value.state
            await running.aclose()
    assert sorted(degraded) == ["ack", "connection"]
    assert (stats.faults, stats.degraded) == (2, ())
    assert health is HealthState.RUNNING
