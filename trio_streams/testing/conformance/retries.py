"""Retries that keep their promises, on every transport that retries by copy.

- A retry copy reaches only the subscription that asked for it: it names its target
  (``RETRY_TARGET_HEADER``, ``<app>/<subscription>``), and other subscriptions of the stream —
  in this app or another, sequential, in lanes or in batches — pass over it without handling it.
- In an ordered lane (``by_key``), a retry keeps the key's order: the key's later messages wait
  behind it; ``retry_after`` holds the lane for the delay; at shutdown a lane's delay is cut
  short and the delivery is settled as a retry copy, so nothing is lost.
- A dead letter does not carry the target, so every reader of the dead-letter stream sees it.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from trio_streams import (
    RETRY_COUNT_HEADER,
    RETRY_TARGET_HEADER,
    App,
    Context,
    Outcome,
    Position,
    RunningApp,
    ack,
    retry,
    retry_after,
)

from ._running import serving
from .subject import Capability, TransportUnderTest, needs
from .suite import TransportSuite


class RetrySemantics(TransportSuite):
    """Retry copies reach only the subscription that asked; ordered lanes keep their order."""

    @pytest.mark.parametrize(
        "shape", [{}, {"workers": 3}, {"workers": 2, "by_key": "k"}, {"batch": 2, "max_wait": 0.01}]
    )
    @needs(Capability.FAN_OUT)
    async def test_other_subscriptions_pass_over_a_retry_copy_whatever_their_shape(
        self, transport: TransportUnderTest, shape: dict[str, Any]
    ) -> None:
        app, broker = transport.app("svc")
        retried = trio.Event()
        seen_last = trio.Event()
        other: list[tuple[int, int]] = []

        @broker.subscriber(transport.live("s"), name="asks")
        async def asks(n: int, ctx: Context) -> Outcome:
            if ctx.attempt == 2:
                retried.set()
            return retry() if ctx.attempt == 1 else ack()

        def note(n: int, attempt: int) -> None:
            other.append((n, attempt))
            if n == 2:
                seen_last.set()

        if "batch" in shape:

            @broker.subscriber(transport.live("s"), name="other", **shape)
            async def batch(ns: list[int], ctxs: list[Context]) -> None:
                for n, ctx in zip(ns, ctxs, strict=True):
                    note(n, ctx.attempt)
        else:

            @broker.subscriber(transport.live("s"), name="other", **shape)
            async def one(n: int, ctx: Context) -> None:
                note(n, ctx.attempt)

        async with serving(app):
            await broker.publish(transport.to("s"), 1, headers={"k": "a"})
            with trio.fail_after(10):
                await retried.wait()
            await broker.publish(transport.to("s"), 2, headers={"k": "a"})
            with trio.fail_after(10):
                await seen_last.wait()
        assert other == [(1, 1), (2, 1)]

    @needs(Capability.FAN_OUT, Capability.POSITIONS, Capability.RETAIN, Capability.RETRY_COPIES)
    async def test_a_subscription_of_the_same_name_in_another_app_passes_over_the_copy(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("billing")
        retried = trio.Event()
        got: dict[str, list[int]] = {"billing": [], "shipping": []}

        @broker.subscriber(transport.live("s"), name="handle")
        async def bill(n: int, ctx: Context) -> Outcome:
            got["billing"].append(ctx.attempt)
            if ctx.attempt == 2:
                retried.set()
            return retry() if ctx.attempt == 1 else ack()

        async with serving(app):
            await broker.publish(transport.to("s"), 1)
            with trio.fail_after(10):
                await retried.wait()
        [(_, copy)] = [
            m for m in await transport.messages(broker, "s") if RETRY_COUNT_HEADER in m[1]
        ]
        # A stream file's plain subscription adds its process (every replica reads the file).
        assert copy[RETRY_TARGET_HEADER].partition("@")[0] == "billing/handle"

        # Another service reads the same stream, with a subscription of the same name, and follows
        # it from the beginning: it handles the original once and passes over billing's copy.
        shipping = App("shipping")
        other = shipping.broker(transport.broker_like(broker))
        caught_up = trio.Event()

        @other.subscriber(transport.live("s", start_at=Position.beginning()), name="handle")
        async def ship(n: int, ctx: Context) -> None:
            got["shipping"].append(n * 10 + ctx.attempt)
            if n == 2:
                caught_up.set()

        async with serving(shipping):
            await other.publish(transport.to("s"), 2)
            with trio.fail_after(10):
                await caught_up.wait()
        assert got == {"billing": [1, 2], "shipping": [11, 21]}

    async def test_a_dead_letter_does_not_name_a_retry_target(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("svc")
        spent = trio.Event()

        @broker.subscriber(transport.live("s"), name="sub", max_attempts=2, dead_letter="dlq")
        async def handle(n: int, ctx: Context) -> None:
            if ctx.attempt == 2:
                spent.set()
            raise ValueError("no")

        async with serving(app) as running:
            await broker.publish(transport.to("s"), 1)
            with trio.fail_after(10):
                await spent.wait()
                while not await transport.dead_lettered(broker, "dlq"):
                    await trio.testing.wait_all_tasks_blocked()
                    await trio.lowlevel.checkpoint()
            del running
        [(payload, headers)] = await transport.dead_lettered(broker, "dlq")
        assert payload == b"1"
        assert RETRY_TARGET_HEADER not in headers
        assert headers["x-dead-letter-reason"] == "max-attempts"

    # ---- ordered lanes ---------------------------------------------------------------------------

    @pytest.mark.parametrize("workers", [1, 3])
    @needs(Capability.REPLAY)
    async def test_in_an_ordered_lane_a_retry_keeps_the_keys_order(
        self, transport: TransportUnderTest, workers: int
    ) -> None:
        app, broker = transport.app("bank")
        events = [("A", "open"), ("B", "open"), ("A", "deposit"), ("A", "withdraw"), ("B", "close")]
        await transport.preload_json(broker, [{"key": k, "what": w} for k, w in events])
        handled: list[tuple[str, str]] = []
        failed_once: set[str] = set()

        def key(event: dict[str, str]) -> str:
            return event["key"]

        @broker.subscriber(transport.replay("s"), name="ledger", workers=workers, by_key=key)
        async def ledger(event: dict[str, str], ctx: Context) -> Outcome:
            if event["what"] == "open" and event["key"] not in failed_once:
                failed_once.add(event["key"])
                return retry()
            handled.append((event["key"], event["what"]))
            return ack()

        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            with trio.fail_after(10):
                await running.wait_stopped()
        per_key = {k: [w for kk, w in handled if kk == k] for k in ("A", "B")}
        assert per_key == {"A": ["open", "deposit", "withdraw"], "B": ["open", "close"]}
        # Retried in place: no copy was appended for a lane's retry.
        assert not [m for m in await transport.messages(broker, "s") if RETRY_COUNT_HEADER in m[1]]

    @needs(Capability.REPLAY, Capability.VIRTUAL_TIME)
    async def test_in_an_ordered_lane_retry_after_holds_the_key_for_the_delay(
        self, transport: TransportUnderTest, autojump_clock: trio.abc.Clock
    ) -> None:
        app, broker = transport.app("bank")
        await transport.preload_json(broker, [{"key": "A", "n": 1}, {"key": "A", "n": 2}])
        handled: list[tuple[int, int, float]] = []
        start = trio.current_time()

        def key(event: dict[str, Any]) -> Any:
            return event["key"]

        @broker.subscriber(transport.replay("s"), name="ledger", workers=2, by_key=key)
        async def ledger(event: dict[str, Any], ctx: Context) -> Outcome:
            handled.append((event["n"], ctx.attempt, trio.current_time() - start))
            return retry_after(30) if (event["n"], ctx.attempt) == (1, 1) else ack()

        async with trio.open_nursery() as nursery:
            running: RunningApp = await nursery.start(app.serve)
            with trio.fail_after(120):
                await running.wait_stopped()
        assert [(n, attempt) for n, attempt, _ in handled] == [(1, 1), (1, 2), (2, 1)]
        assert handled[1][2] >= 30  # the retry waited out its delay, and 2 waited behind it

    @needs(Capability.RETAIN, Capability.VIRTUAL_TIME, Capability.RETRY_COPIES)
    async def test_shutdown_cuts_a_lanes_delay_short_and_settles_a_retry_copy(
        self, transport: TransportUnderTest, autojump_clock: trio.abc.Clock
    ) -> None:
        app, broker = transport.app("bank")
        first = trio.Event()

        @broker.subscriber(transport.live("s"), name="ledger", workers=2, by_key="k")
        async def ledger(n: int, ctx: Context) -> Outcome:
            first.set()
            return retry_after(3600)

        start = trio.current_time()
        async with serving(app) as running:
            await broker.publish(transport.to("s"), 1, headers={"k": "A"})
            with trio.fail_after(10):
                await first.wait()
            await trio.testing.wait_all_tasks_blocked()
            [stats] = running.stats().values()
            assert stats.delayed == 1  # the lane's wait counts as a delayed retry
        assert trio.current_time() - start < 60  # the hour did not hold shutdown up
        copies = [m for m in await transport.messages(broker, "s") if RETRY_COUNT_HEADER in m[1]]
        assert [(payload, h[RETRY_COUNT_HEADER]) for payload, h in copies] == [(b"1", "1")]

    @needs(Capability.RETAIN)
    async def test_a_dead_letter_reader_handles_a_spent_letter_with_its_own_attempts(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("svc")
        audited: list[tuple[int, int, str]] = []
        audited_one = trio.Event()

        # A copy already tried max_attempts times (its handler crashed the process, say) arrives.
        @broker.subscriber(transport.live("s"), name="sub", max_attempts=3, dead_letter="dlq")
        async def handle(n: int) -> None:
            raise AssertionError("never called: the message is spent")

        # The dead-letter stream's reader, with the default cap, handles the letter.
        @broker.subscriber(transport.dead_letters("dlq"), name="audit")
        async def audit(n: int, ctx: Context) -> None:
            audited.append((n, ctx.attempt, ctx.headers["x-dead-letter-attempts"]))
            audited_one.set()

        async with serving(app):
            await broker.publish(transport.to("s"), 1, headers={RETRY_COUNT_HEADER: "3"})
            with trio.fail_after(10):
                await audited_one.wait()
        # Tried three times before it arrived, not a fourth: the letter says so.
        assert audited == [(1, 1, "3")]
        [(_, headers)] = await transport.dead_lettered(broker, "dlq")
        assert RETRY_COUNT_HEADER not in headers

    @needs(Capability.RETAIN)
    async def test_a_publish_cancelled_before_it_starts_publishes_nothing(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("svc")
        async with serving(app):
            with trio.CancelScope() as scope:
                scope.cancel()
                await broker.publish(transport.to("s"), 1)
            assert scope.cancelled_caught
            await broker.publish(transport.to("s"), 2)
        assert [payload for payload, _ in await transport.messages(broker, "s")] == [b"2"]

    @needs(Capability.RETAIN)
    async def test_a_handler_forwarding_a_retry_copys_headers_does_not_make_the_next_stage_skip_it(
        self, transport: TransportUnderTest
    ) -> None:
        app, broker = transport.app("pipeline")
        forwarded: list[dict[str, str]] = []
        stage_two = trio.Event()

        @broker.subscriber(transport.live("a"), name="one")
        async def one(n: int, ctx: Context) -> Outcome:
            if ctx.attempt == 1:
                return retry()
            forwarded.append(dict(ctx.headers))
            await ctx.publish("b", n, headers=ctx.headers)  # pass the correlation id along
            return ack()

        @broker.subscriber(transport.live("b"), name="two")
        async def two(n: int, ctx: Context) -> None:
            assert ctx.attempt == 1
            stage_two.set()

        async with serving(app):
            await broker.publish(transport.to("a"), 1, headers={"correlation-id": "c-1"})
            with trio.fail_after(10):
                await stage_two.wait()
        assert forwarded == [{"correlation-id": "c-1"}]  # the producer's headers, not the copy's
        [(_, headers)] = await transport.messages(broker, "b")
        assert headers == {"correlation-id": "c-1"}
