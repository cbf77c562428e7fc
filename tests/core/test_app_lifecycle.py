"""App, hooks, health, graceful shutdown and failure."""

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import (
    App,
    AppFailed,
    ConfigurationError,
    Context,
    Health,
    HealthState,
    MemoryBroker,
    MemoryStream,
    retry_after,
)
from trio_streams.memory import MemoryTransport


async def test_serve_in_a_callers_nursery_publishes_and_closes() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    seen: list[int] = []

    handled = trio.Event()

    @broker.subscriber(MemoryStream("numbers"))
    async def handle(n: int) -> None:
        seen.append(n)
        handled.set()

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        assert running.health.value.state is HealthState.RUNNING
        await running.publish(broker, "numbers", 7)
        await handled.wait()
        await running.aclose()
    assert seen == [7]
    assert app.health.value.state is HealthState.STOPPED


async def test_hooks_run_in_order_around_connecting_and_closing() -> None:
    events: list[str] = []

    class Recording(MemoryBroker):
        @asynccontextmanager
        async def connect(self) -> AsyncIterator[MemoryTransport]:
            events.append(f"connect {self.name}")
            yield MemoryTransport(self.hub)
            events.append(f"close {self.name}")

    app = App("svc")
    app.broker(Recording(name="first"))
    app.broker(Recording(name="second"))

    @app.on_startup
    def setup(the_app: App) -> None:
        events.append("on_startup")
        the_app.state.db = "ready"

    @app.after_startup
    async def started() -> None:
        events.append(f"after_startup {app.health.value.state.value}")

    @app.on_shutdown
    async def stopping() -> None:
        events.append(f"on_shutdown {app.health.value.state.value}")

    @app.after_shutdown
    async def stopped() -> None:
        events.append("after_shutdown")

    async with serving(app):
        events.append("serving")
    assert events == [
        "on_startup",
        "connect first",
        "connect second",
        "after_startup starting",
        "serving",
        "on_shutdown shutting down",
        "close second",
        "close first",
        "after_shutdown",
    ]
    assert app.state.db == "ready"


async def test_handlers_reach_shared_state_through_the_context() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    got: list[object] = []

    @app.on_startup
    def setup() -> None:
        app.state.prefix = "order-"

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int, ctx: Context) -> None:
        got.append(ctx.state.prefix + str(n))

    async with app.test() as t:
        await t.publish("s", 5)
    assert got == ["order-5"]


async def test_health_is_observable_through_every_state() -> None:
    app = App("svc")
    app.broker(MemoryBroker())
    seen: set[HealthState] = set()

    async def watch(state: HealthState) -> None:
        await app.health.wait_value(lambda health: health.state is state)
        seen.add(state)

    async with trio.open_nursery() as nursery:
        for state in (HealthState.STARTING, HealthState.RUNNING, HealthState.SHUTTING_DOWN):
            nursery.start_soon(watch, state)
        await trio.testing.wait_all_tasks_blocked()
        assert app.health.value.state is HealthState.STOPPED
        async with serving(app):
            assert app.health.value.ok
    assert seen == {HealthState.STARTING, HealthState.RUNNING, HealthState.SHUTTING_DOWN}
    assert app.health.value.state is HealthState.STOPPED
    assert str(app.health.value) == "stopped"


async def test_shutdown_drains_a_handler_mid_flight(autojump_clock: trio.abc.Clock) -> None:
    app = App("svc", shutdown_timeout=30)
    broker = app.broker(MemoryBroker())
    started = trio.Event()
    finished: list[int] = []

    @broker.subscriber(MemoryStream("s"))
    async def slow(n: int) -> None:
        started.set()
        await trio.sleep(5)
        finished.append(n)

    async with serving(app) as running:
        await running.publish(broker, "s", 1)
        await started.wait()
    assert finished == [1]


async def test_shutdown_drains_what_was_already_read(autojump_clock: trio.abc.Clock) -> None:
    app = App("svc", shutdown_timeout=60)
    broker = app.broker(MemoryBroker())
    started = trio.Event()
    finished: list[int] = []

    @broker.subscriber(MemoryStream("s"), buffer=4)
    async def slow(n: int) -> None:
        started.set()
        await trio.sleep(1)
        finished.append(n)

    async with serving(app) as running:
        for n in range(3):
            await running.publish(broker, "s", n)
        await started.wait()
        await trio.testing.wait_all_tasks_blocked()
        assert (
            running.stats()["test_shutdown_drains_what_was_already_read.<locals>.slow"].queued == 2
        )
    assert finished == [0, 1, 2]


async def test_a_drain_that_overruns_the_timeout_abandons_the_rest(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    app = App("svc", shutdown_timeout=5)
    broker = app.broker(MemoryBroker())
    started = trio.Event()
    cancelled: list[bool] = []

    @broker.subscriber(MemoryStream("s"))
    async def stuck(n: int) -> None:
        started.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            cancelled.append(True)
            raise

    start = trio.current_time()
    async with serving(app) as running:
        await running.publish(broker, "s", 1)
        await started.wait()
    assert cancelled == [True]
    assert trio.current_time() - start == pytest.approx(5, abs=0.01)
    assert "abandoning 1 delivery" in caplog.text


async def test_pending_delayed_retries_fire_before_brokers_close(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    settled: list[str] = []
    attempts: list[int] = []

    @broker.subscriber(MemoryStream("s"))
    async def later(n: int, ctx: Context) -> object:
        attempts.append(ctx.attempt)
        return retry_after(3600)

    class Watch(MemoryBroker):
        @asynccontextmanager
        async def connect(self) -> AsyncIterator[MemoryTransport]:
            yield MemoryTransport(self.hub)
            settled.append(f"closed after {len(broker.hub.log('s'))} message(s)")

    app.broker(Watch())
    start = trio.current_time()
    async with serving(app) as running:
        await running.publish(broker, "s", 1)
        await trio.testing.wait_all_tasks_blocked()
        assert running.stats()[next(iter(running.stats()))].delayed == 1
    assert trio.current_time() - start < 1  # the hour-long delay did not hold shutdown up
    assert attempts == [1]
    # The retry copy was published at shutdown, before the broker closed.
    assert settled == ["closed after 2 message(s)"]
    copy = broker.hub.log("s").get(2)
    assert copy.payload == b"1"
    assert copy.headers["x-ruststream-retry-count"] == "1"
    assert copy.headers["x-trio-streams-retry-for"].startswith("svc/")


async def test_a_failing_subscription_fails_the_app_with_its_reason() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None: ...

    class Broken(Exception):
        pass

    async def broken_settle(*args: object) -> None:
        raise Broken("settle failed: disk on fire")

    with pytest.RaisesGroup(pytest.RaisesExc(AppFailed, match="disk on fire")) as failure:
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            runner = running._runners[0]
            runner.source.settle = broken_settle
            await running.publish(broker, "s", 1)
            await running.wait_stopped()
    error = failure.value.exceptions[0]
    assert "subscription 'test_a_failing_subscription" in str(error)
    assert isinstance(error.__cause__, Broken)
    assert app.health.value.state is HealthState.FAILED
    assert "disk on fire" in (app.health.value.reason or "")


async def test_a_failing_startup_hook_fails_serve() -> None:
    app = App("svc")
    app.broker(MemoryBroker())

    @app.on_startup
    def boom() -> None:
        raise RuntimeError("no database")

    with pytest.RaisesGroup(pytest.RaisesExc(RuntimeError, match="no database")):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
    assert app.health.value.state is HealthState.FAILED


async def test_an_app_whose_subscriptions_all_ended_stops_by_itself() -> None:
    app = App("job")
    broker = app.broker(MemoryBroker())
    for n in range(3):
        broker.hub.append("s", str(n).encode(), {})
    seen: list[int] = []

    @broker.subscriber(MemoryStream("s").replay())
    async def handle(n: int) -> None:
        seen.append(n)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()
    assert seen == [0, 1, 2]
    assert app.health.value.state is HealthState.STOPPED


async def test_an_app_made_with_stop_when_finished_false_keeps_running_after_its_replays_end(
    autojump_clock: trio.abc.Clock,
) -> None:
    app = App("job", stop_when_finished=False)
    broker = app.broker(MemoryBroker())
    broker.hub.append("s", b"1", {})
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(MemoryStream("s").replay())
    async def handle(n: int) -> None:
        seen.append(n)
        done.set()

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await done.wait()
        with trio.move_on_after(3600) as waited:
            await running.wait_stopped()
        assert waited.cancelled_caught, "the app stopped by itself"
        assert app.health.value.state is not HealthState.STOPPED
        running.request_stop()
    assert seen == [1]


async def test_an_app_cannot_run_twice_at_once() -> None:
    app = App("svc")
    app.broker(MemoryBroker())
    async with serving(app):
        with pytest.RaisesGroup(pytest.RaisesExc(ConfigurationError, match="already running")):
            async with trio.open_nursery() as nursery:
                await nursery.start(app.serve)


def test_a_broker_registers_once() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    with pytest.raises(ConfigurationError, match="already registered"):
        app.broker(broker)
    with pytest.raises(ConfigurationError, match="takes a Broker"):
        app.broker("redis://")  # type: ignore[type-var]


async def test_publishing_outside_a_running_app_is_a_clear_error() -> None:
    from trio_streams import NotConnected

    broker = App("svc").broker(MemoryBroker())
    with pytest.raises(NotConnected, match="is not connected"):
        await broker.publish("s", 1)


async def test_logs_name_the_subscription(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), max_attempts=1, name="charges")
    async def handle(n: int) -> None:
        raise ValueError("card declined")

    async with app.test() as t:
        await t.publish("s", 1)
    assert "charges: handler failed on attempt 1 of 1" in caplog.text
    assert (
        "charges: message at Position.sequence(1, stream='s') dropped after 1 attempt"
        in caplog.text
    )


async def test_readers_opened_before_a_failing_one_are_closed() -> None:
    from trio_streams.memory.broker import MemorySubscription

    closed: list[str] = []

    class Tracked(MemorySubscription):
        async def aclose(self) -> None:
            closed.append(self._label)
            await super().aclose()

    class Picky(MemoryTransport):
        def open_subscription(self, source, options, *, label):  # type: ignore[no-untyped-def]
            if label == "second":
                raise OSError("cannot open the second reader")
            stream = source.in_process()
            return Tracked(self.hub, stream, label=label, count=4)

    class PickyBroker(MemoryBroker):
        @asynccontextmanager
        async def connect(self) -> AsyncIterator[MemoryTransport]:
            yield Picky(self.hub)

    app = App("svc")
    broker = app.broker(PickyBroker())

    async def handle(n: int) -> None: ...

    broker.subscriber(MemoryStream("a"), name="first")(handle)
    broker.subscriber(MemoryStream("b"), name="second")(handle)
    with pytest.RaisesGroup(pytest.RaisesExc(OSError, match="second reader")):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
    assert closed == ["first"]
    assert app.health.value.state is HealthState.FAILED


async def test_cancelling_serve_stops_the_app_without_calling_it_failed() -> None:
    app = App("svc")
    app.broker(MemoryBroker())
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        nursery.cancel_scope.cancel()
    assert app.health.value == Health(HealthState.STOPPED, "cancelled")
