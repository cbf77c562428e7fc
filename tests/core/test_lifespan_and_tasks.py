"""Work that lives as long as the app: ``App(lifespan=...)`` / ``@app.lifespan`` around the whole
run, and ``@app.task`` background tasks in the app's nursery, cancelled after the drain."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import App, AppFailed, ConfigurationError, HealthState, MemoryBroker, MemoryStream


def make_app(events: list[str], **options: object) -> tuple[App, MemoryBroker]:
    app = App("svc", **options)  # type: ignore[arg-type]
    broker = app.broker(MemoryBroker())
    app.on_startup(lambda: events.append("on_startup"))
    app.after_startup(lambda: events.append("after_startup"))
    app.on_shutdown(lambda: events.append("on_shutdown"))
    app.after_shutdown(lambda: events.append("after_shutdown"))
    return app, broker


async def test_a_lifespan_wraps_the_whole_run_hooks_and_brokers_included() -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan(app: App) -> AsyncIterator[None]:
        events.append(f"enter {app.name}")
        app.state.pool = "pool"
        try:
            yield
        finally:
            events.append("exit")

    app, broker = make_app(events, lifespan=lifespan)

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None:
        events.append(f"handled {n} with {app.state.pool}")

    async with serving(app) as running:
        await running.publish(broker, "s", 1)
        await trio.testing.wait_all_tasks_blocked()
    assert events == [
        "enter svc",
        "on_startup",
        "after_startup",
        "handled 1 with pool",
        "on_shutdown",
        "after_shutdown",
        "exit",
    ]


async def test_several_lifespans_are_entered_in_order_and_left_in_reverse() -> None:
    events: list[str] = []
    app = App("svc")

    def named(name: str) -> None:
        @app.lifespan
        @asynccontextmanager
        async def lifespan() -> AsyncIterator[None]:
            events.append(f"enter {name}")
            yield
            events.append(f"exit {name}")

    named("a")
    named("b")
    async with serving(app):
        pass
    assert events == ["enter a", "enter b", "exit b", "exit a"]


async def test_a_lifespan_that_fails_before_its_yield_fails_the_start() -> None:
    database_up = False

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        if not database_up:
            raise OSError("no database")
        yield

    app = App("svc", lifespan=lifespan)
    app.broker(MemoryBroker())
    with pytest.RaisesGroup(pytest.RaisesExc(OSError, match="no database"), flatten_subgroups=True):
        async with trio.open_nursery() as nursery:
            await nursery.start(app.serve)
    assert app.health.value.state is HealthState.FAILED


async def test_a_lifespan_is_left_when_the_app_is_cancelled() -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        try:
            yield
        finally:
            events.append("exit")

    app = App("svc", lifespan=lifespan)
    app.broker(MemoryBroker())
    async with trio.open_nursery() as nursery:
        await nursery.start(app.serve)
        nursery.cancel_scope.cancel()
    assert events == ["exit"]


async def test_a_task_runs_once_the_subscriptions_run_and_may_publish(
    autojump_clock: trio.abc.Clock,
) -> None:
    events: list[str] = []
    app, broker = make_app(events)
    handled = trio.Event()

    @broker.subscriber(MemoryStream("ticks"))
    async def tick(n: int) -> None:
        events.append(f"tick {n}")
        if n == 3:
            handled.set()

    @app.task
    async def ticker() -> None:
        events.append("task started")
        for n in range(1, 4):
            await trio.sleep(60)
            await broker.publish("ticks", n)

    async with serving(app):
        with trio.fail_after(600):
            await handled.wait()
    assert events[:3] == ["on_startup", "after_startup", "task started"]
    assert events[3:6] == ["tick 1", "tick 2", "tick 3"]


async def test_a_task_is_cancelled_at_shutdown_after_the_drain() -> None:
    events: list[str] = []
    app, broker = make_app(events)
    release = trio.Event()
    in_handler = trio.Event()

    @broker.subscriber(MemoryStream("s"))
    async def slow(n: int) -> None:
        in_handler.set()
        await release.wait()
        events.append("handler done")

    @app.task
    async def forever(app: App) -> None:
        try:
            await trio.sleep_forever()
        finally:
            events.append(f"task of {app.name} cancelled")

    app.on_shutdown(release.set)  # the drain can finish once shutdown began
    async with serving(app) as running:
        await running.publish(broker, "s", 1)
        with trio.fail_after(5):
            await in_handler.wait()
    tail = events[events.index("on_shutdown") :]
    assert tail == ["on_shutdown", "handler done", "task of svc cancelled", "after_shutdown"]


async def test_a_task_that_raises_fails_the_app() -> None:
    app = App("svc")
    app.broker(MemoryBroker())

    @app.task
    async def pusher() -> None:
        await trio.lowlevel.checkpoint()
        raise ConnectionError("metrics gateway gone")

    with (
        trio.fail_after(5),
        pytest.RaisesGroup(pytest.RaisesExc(AppFailed, match="task .*pusher failed")),
    ):
        async with trio.open_nursery() as nursery:
            running = await nursery.start(app.serve)
            await running.wait_stopped()
    assert app.health.value.state is HealthState.FAILED


async def test_a_task_that_returns_just_ends_and_the_app_runs_on() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    done = trio.Event()
    seen: list[int] = []

    @broker.subscriber(MemoryStream("s"))
    async def handle(n: int) -> None:
        seen.append(n)

    @app.task
    async def once() -> None:
        await trio.lowlevel.checkpoint()
        done.set()

    async with serving(app) as running:
        await done.wait()
        await running.publish(broker, "s", 7)
        await trio.testing.wait_all_tasks_blocked()
        assert running.health.value.state is HealthState.RUNNING
    assert seen == [7]


async def test_tasks_and_lifespans_run_under_app_test_too(
    autojump_clock: trio.abc.Clock,
) -> None:
    events: list[str] = []

    @asynccontextmanager
    async def lifespan() -> AsyncIterator[None]:
        events.append("enter")
        yield
        events.append("exit")

    app = App("svc", lifespan=lifespan)
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("ticks"))
    async def tick(n: int) -> None: ...

    @app.task
    async def ticker() -> None:
        n = 0
        while True:
            await trio.sleep(60)
            n += 1
            await broker.publish("ticks", n)

    async with app.test() as t:
        await t.wait(150)
        assert t.handler(tick).messages == [1, 2]
    assert events == ["enter", "exit"]


def test_only_async_functions_are_tasks_and_lifespans_must_be_callable() -> None:
    app = App("svc")
    with pytest.raises(ConfigurationError, match="async def"):
        app.task(lambda: None)
    with pytest.raises(ConfigurationError, match="async context manager"):
        App("svc", lifespan=object())  # type: ignore[arg-type]
