"""Shutdown and cancellation (docs/architecture.md, Shutdown), stated once for every transport.

A graceful stop drains the handlers in flight; a drain that overruns ``shutdown_timeout``
abandons what is left; cancelling the nursery that runs ``app.serve`` stops the app without
calling it a failure.
"""

from __future__ import annotations

import trio
import trio.testing

from trio_streams import HealthState, RunningApp

from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite


class Shutdown(TransportSuite):
    """Graceful stops, drains that overrun ``shutdown_timeout``, and cancellation."""

    async def test_a_graceful_stop_drains_the_handlers_in_flight(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("shutdown")
        started: list[int] = []
        finished: list[int] = []
        both_started = trio.Event()
        release = trio.Event()

        @broker.subscriber(transport.live("s"), workers=2, name="sub")
        async def handle(n: int) -> None:
            started.append(n)
            if len(started) == 2:
                both_started.set()
            await release.wait()
            finished.append(n)

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await broker.publish(transport.to("s"), 1)
                await broker.publish(transport.to("s"), 2)
                await both_started.wait()
                running.request_stop()
                await running.health.wait_value(lambda h: h.state is HealthState.SHUTTING_DOWN)
                await trio.testing.wait_all_tasks_blocked()
                assert finished == []  # the stop is waiting for them, not cancelling them
                release.set()
                await running.wait_stopped()
        assert sorted(finished) == [1, 2]
        assert app.health.value.state is HealthState.STOPPED
        assert running.stats()["sub"].outstanding == 0

    @needs(Capability.VIRTUAL_TIME)
    async def test_a_drain_that_overruns_shutdown_timeout_abandons_what_is_left(
        self, transport: TransportUnderTest, autojump_clock: trio.abc.Clock
    ) -> None:
        app, broker = transport.app("shutdown", shutdown_timeout=5)
        started = trio.Event()
        cancelled_at: list[float] = []

        @broker.subscriber(transport.live("s"), name="sub")
        async def handle(n: int) -> None:
            started.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled_at.append(trio.current_time())
                raise

        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            await broker.publish(transport.to("s"), 1)
            with trio.fail_after(10):
                await started.wait()
            stop_asked_at = trio.current_time()
            # No deadline around the close: under autojump_clock the clock jumps to any pending
            # deadline while a file's writer fsyncs in a worker thread.
            await running.aclose()  # returns: the app does not wait for the handler for ever
        assert len(cancelled_at) == 1
        assert 5 <= cancelled_at[0] - stop_asked_at < 6
        assert app.health.value.state is HealthState.STOPPED  # abandoning is not a failure
        assert running.stats()["sub"].outstanding == 0  # counted out, never settled

    async def test_cancelling_the_nursery_running_serve_stops_the_app_without_app_failed(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("cancel")
        started = trio.Event()
        cancelled: list[int] = []

        @broker.subscriber(transport.live("s"), name="sub")
        async def handle(n: int) -> None:
            started.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append(n)
                raise

        with trio.fail_after(10):
            # An AppFailed (or any error) raised by serve would escape this nursery and fail the
            # test.
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await broker.publish(transport.to("s"), 1)
                await started.wait()
                nursery.cancel_scope.cancel()
            await running.wait_stopped()
        assert cancelled == [1]  # cancellation reached the handler
        assert app.health.value.state is HealthState.STOPPED
        assert app.health.value.reason == "cancelled"
