"""Settling per the settle table (docs: Outcomes, ordering, defaults), on every transport.

ack (or returning None) and drop consume the delivery; retry delivers a copy to the subscription
that asked for it, with its attempt counted; retry_after(d) does so after d on Trio's clock; an
exception retries up to ``max_attempts`` deliveries, then dead-letters the message as it arrived.
"""

from __future__ import annotations

import pytest
import trio

from trio_streams import (
    Context,
    Headers,
    Outcome,
    RunningApp,
    ack,
    drop,
    retry,
    retry_after,
)
from trio_streams.core.transport import DEAD_LETTER_HEADERS

from ._running import serving
from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite


async def replay_outcomes(
    transport: TransportUnderTest, count: int, outcome: Outcome | None
) -> list[int]:
    """Replay ``count`` messages through a handler that answers ``outcome``; return the attempt
    of each delivery, in order. The replay ends only once nothing is outstanding."""
    app, broker = transport.app("settling")
    await transport.preload(broker, count)
    attempts: list[int] = []

    @broker.subscriber(transport.replay("s"), max_attempts=3, name="sub")
    async def handle(n: int, ctx: Context) -> Outcome | None:
        attempts.append(ctx.attempt)
        return outcome

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            await running.wait_stopped()
            stats = running.stats()["sub"]
    assert (stats.outstanding, stats.delayed) == (0, 0)
    return attempts


class Settling(TransportSuite):
    """The settle table: ack, drop, retry, retry_after, exceptions and dead letters."""

    @needs(Capability.REPLAY)
    @pytest.mark.parametrize("outcome", [ack(), None], ids=["ack", "returning-None"])
    async def test_ack_or_returning_none_consumes_the_delivery(
        self, transport: TransportUnderTest, outcome: Outcome | None
    ) -> None:
        # Each message delivered once: nothing redelivered, nothing left outstanding.
        assert await replay_outcomes(transport, 3, outcome) == [1, 1, 1]

    @needs(Capability.REPLAY)
    async def test_drop_consumes_the_delivery(self, transport: TransportUnderTest) -> None:
        assert await replay_outcomes(transport, 3, drop()) == [1, 1, 1]

    @needs(Capability.REPLAY)
    async def test_retry_delivers_a_copy_with_attempt_2_to_that_subscription(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("settling")
        await transport.preload(broker, 2)
        seen: list[tuple[int, int]] = []

        @broker.subscriber(transport.replay("s"), max_attempts=5, name="sub")
        async def handle(n: int, ctx: Context) -> Outcome:
            seen.append((n, ctx.attempt))
            return retry() if (n, ctx.attempt) == (1, 1) else ack()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                running: RunningApp = await nursery.start(app.serve)
                await running.wait_stopped()  # a replay never ends while a retry is outstanding
        # The copy comes after what was already there, counted as the second attempt.
        assert seen == [(1, 1), (2, 1), (1, 2)]

    @needs(Capability.FAN_OUT)
    async def test_a_retry_copy_reaches_only_the_subscription_that_asked_for_it(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("settling")
        asked: list[tuple[int, int]] = []
        other: list[tuple[int, int]] = []
        retried = trio.Event()
        other_got_2 = trio.Event()

        @broker.subscriber(transport.live("s"), name="asks")
        async def asks(n: int, ctx: Context) -> Outcome:
            asked.append((n, ctx.attempt))
            if ctx.attempt == 2:
                retried.set()
            return retry() if ctx.attempt == 1 else ack()

        @broker.subscriber(transport.live("s"), name="other")
        async def passes_over(n: int, ctx: Context) -> None:
            other.append((n, ctx.attempt))
            if n == 2:
                other_got_2.set()

        async with serving(app):
            await broker.publish(transport.to("s"), 1)
            with trio.fail_after(10):
                await retried.wait()
            # The other subscription has read past the copy by then.
            await broker.publish(transport.to("s"), 2)
            with trio.fail_after(10):
                await other_got_2.wait()
        assert asked[:2] == [(1, 1), (1, 2)]
        assert other == [(1, 1), (2, 1)]

    @needs(Capability.REPLAY, Capability.VIRTUAL_TIME, Capability.TRIO_CLOCK_DELAYS)
    async def test_retry_after_a_delay_delivers_the_copy_after_that_delay_on_trios_clock(
        self, transport: TransportUnderTest, autojump_clock: trio.abc.Clock
    ) -> None:
        app, broker = transport.app("settling")
        await transport.preload(broker, 1)
        handled_at: list[tuple[int, float]] = []
        copy_handled = trio.Event()

        @broker.subscriber(transport.replay("s"), name="sub")
        async def handle(n: int, ctx: Context) -> Outcome:
            handled_at.append((ctx.attempt, trio.current_time()))
            if ctx.attempt == 1:
                return retry_after(30)
            copy_handled.set()
            return ack()

        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            with trio.fail_after(60):
                await copy_handled.wait()
            # The replay ends by itself. No deadline around the close: under autojump_clock the
            # clock jumps to any pending deadline while a file's writer fsyncs in a worker thread.
            await running.wait_stopped()
        assert [attempt for attempt, _ in handled_at] == [1, 2]
        waited = handled_at[1][1] - handled_at[0][1]
        assert 30 <= waited < 31, waited

    async def test_an_exception_retries_up_to_max_attempts_then_dead_letters_payload_and_headers(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("settling")
        attempts: list[int] = []
        dead: list[tuple[int, dict[str, str]]] = []
        dead_lettered = trio.Event()

        @broker.subscriber(transport.live("s"), max_attempts=3, dead_letter="s.dead", name="sub")
        async def handle(n: int, ctx: Context) -> None:
            attempts.append(ctx.attempt)
            raise ValueError(f"cannot handle {n}")

        @broker.subscriber(transport.dead_letters("s.dead"), name="dead")
        async def read_dead_letters(n: int, headers: Headers) -> None:
            dead.append((n, dict(headers)))
            dead_lettered.set()

        async with serving(app):
            await broker.publish(transport.to("s"), 7, headers={"trace-id": "t7"})
            with trio.fail_after(10):
                await dead_lettered.wait()
        assert attempts == [1, 2, 3]  # max_attempts counts deliveries, the first included
        [(payload, headers)] = dead
        assert payload == 7
        assert headers["trace-id"] == "t7"  # as it arrived
        assert set(DEAD_LETTER_HEADERS) <= set(headers)
        assert headers["x-dead-letter-reason"] == "max-attempts"
        assert headers["x-dead-letter-attempts"] == "3"
        assert headers["x-dead-letter-error"] == "ValueError: cannot handle 7"
        assert headers["x-dead-letter-stream"] == "s"
        assert headers["x-dead-letter-subscription"] == "sub"
