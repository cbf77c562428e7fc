"""The subscription runner on its own: one subscription, an in-process transport, no app.

The runner owns one subscription's tasks (driver, dispatcher, delayed retries, the source's own
tasks): it opens the source before it reports started, closes it last whatever happened, drains
what was read when asked to stop, and ends every delivery read exactly once — settled, or
reported unsettled to the source.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
import trio
import trio.testing

from trio_streams import App, MemoryBroker, MemoryStream
from trio_streams.core.app import State
from trio_streams.core.delivery import Delivery
from trio_streams.core.host import SubscriptionHost
from trio_streams.core.outcome import Outcome, drop
from trio_streams.core.subscription import SubscriptionRunner, SubscriptionState
from trio_streams.core.transport import DeadLetter, Source, Unsettled
from trio_streams.memory.broker import MemorySubscription, MemoryTransport
from trio_streams.memory.log import MemoryHub

LOG = logging.getLogger("tests.runner")


class Recording(MemorySubscription):
    """An in-process subscription that records how each delivery it read ended."""

    def __init__(self, *args: Any, calls: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls = calls
        self.read_out: list[Delivery] = []
        self.ends: list[tuple[bytes, str]] = []

    async def open(self, host: SubscriptionHost) -> None:
        self.calls.append("open")
        await super().open(host)

    def poll(self) -> Sequence[Delivery]:
        batch = super().poll()
        self.read_out.extend(batch)
        return batch

    async def read(self) -> Sequence[Delivery] | None:
        batch = await super().read()
        if batch:
            self.read_out.extend(batch)
        return batch

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        self.ends.append((delivery.payload, outcome.kind.value))
        await super().settle(delivery, outcome)

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        self.ends.append((delivery.payload, why.value))

    async def aclose(self) -> None:
        self.calls.append("aclose")
        await super().aclose()


class RecordingTransport(MemoryTransport):
    def __init__(self, hub: MemoryHub) -> None:
        super().__init__(hub)
        self.calls: list[str] = []
        self.sources: list[Recording] = []

    def open_subscription(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> Recording:
        recording = Recording(self.hub, source.in_process(), label=label, count=4, calls=self.calls)
        self.sources.append(recording)
        return recording


def make_runner(
    handler: Any, *, stream: MemoryStream | None = None, **options: Any
) -> tuple[SubscriptionRunner, RecordingTransport, MemoryHub]:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    broker.subscriber(stream or MemoryStream("s").replay(), name="sub", **options)(handler)
    [subscription] = broker.subscriptions
    hub = MemoryHub()
    transport = RecordingTransport(hub)
    runner = SubscriptionRunner(subscription, transport, app_state=State(), logger=LOG)
    return runner, transport, hub


def publish(hub: MemoryHub, *payloads: bytes) -> None:
    for payload in payloads:
        hub.append("s", payload, {})


async def test_the_runner_opens_the_source_before_it_reports_started_and_closes_it_last() -> None:
    async def handle(n: int) -> None:
        transport.calls.append(f"handle {n}")
        await trio.lowlevel.checkpoint()

    runner, transport, hub = make_runner(handle)
    publish(hub, b"1", b"2")
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        assert transport.calls == ["open"]
        running_state = runner.state
    assert running_state is SubscriptionState.RUNNING
    # A replay ends by itself once everything is settled.
    assert transport.calls == ["open", "handle 1", "handle 2", "aclose"]
    assert runner.state is SubscriptionState.ENDED
    assert runner.finished.is_set()


async def test_stop_reading_handles_what_was_read_then_ends() -> None:
    release = trio.Event()
    handled: list[int] = []

    async def handle(n: int) -> None:
        await release.wait()
        handled.append(n)

    runner, transport, hub = make_runner(handle, stream=MemoryStream("s"))
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        publish(hub, b"1", b"2", b"3")
        await trio.testing.wait_all_tasks_blocked()  # read and queued: the handlers wait
        assert runner.channel.outstanding == 3
        runner.stop_reading()
        draining_state = runner.state
        assert draining_state is SubscriptionState.DRAINING
        publish(hub, b"4")  # after the stop: never read
        release.set()
    assert handled == [1, 2, 3]
    [source] = transport.sources
    assert source.ends == [(b"1", "ack"), (b"2", "ack"), (b"3", "ack")]
    assert transport.calls[-1] == "aclose"


async def test_abandon_ends_every_delivery_read_exactly_once_and_still_closes_the_source() -> None:
    async def handle(n: int) -> None:
        await trio.sleep_forever()

    runner, transport, hub = make_runner(handle, stream=MemoryStream("s"), workers=2)
    async with trio.open_nursery() as nursery:
        await nursery.start(runner.run)
        publish(hub, *(str(n).encode() for n in range(1, 11)))
        await trio.testing.wait_all_tasks_blocked()  # read and queued: the handlers wait
        assert runner.channel.outstanding == 10
        runner.abandon()
    [source] = transport.sources
    read = sorted(d.payload for d in source.read_out)
    assert sorted(payload for payload, _ in source.ends) == read  # each once
    assert {how for _, how in source.ends} == {"abandoned"}
    assert transport.calls[-1] == "aclose"
    assert runner.channel.outstanding == 0


async def test_a_delivery_is_reported_unsettled_only_if_no_settle_began() -> None:
    runner, transport, _hub = make_runner(_noop)
    [source] = transport.sources
    delivery = Delivery("s", b"1", {})
    await runner.settle(delivery, drop())
    runner.unsettled(delivery, Unsettled.ABANDONED)  # too late: it already ended
    other = Delivery("s", b"2", {})
    runner.unsettled(other, Unsettled.PURGED)
    runner.unsettled(other, Unsettled.ABANDONED)
    assert source.ends == [(b"1", "drop"), (b"2", "purged")]


async def test_a_dead_letter_the_source_cannot_write_in_one_step_is_published_then_dropped() -> (
    None
):
    runner, transport, hub = make_runner(_noop)
    [source] = transport.sources
    delivery = Delivery("s", b"payload", {"h": "v"})
    letter = DeadLetter("dlq", "max-attempts", "ValueError: no", 3, "sub", 1_000)
    await runner.dead_letter(delivery, letter)
    [copy] = list(hub.log("dlq").slice(1, 2))
    assert copy.payload == b"payload"
    assert copy.headers["h"] == "v"
    assert copy.headers["x-dead-letter-reason"] == "max-attempts"
    assert source.ends == [(b"payload", "drop")]


async def test_a_runner_that_never_ran_closes_its_source_once() -> None:
    runner, transport, _hub = make_runner(_noop)
    await runner.close_if_unstarted()
    await runner.close_if_unstarted()
    assert transport.calls == ["aclose"]
    assert runner.finished.is_set()


def test_stats_before_the_runner_starts_describe_an_idle_subscription() -> None:
    runner, _transport, hub = make_runner(_noop, workers=3)
    publish(hub, b"1")
    stats = runner.stats()
    assert stats.state is SubscriptionState.CREATED
    assert (stats.queued, stats.outstanding, stats.held, stats.delayed) == (0, 0, 0, 0)
    assert stats.capacity == 16
    assert (stats.faults, stats.degraded) == (0, ())


@pytest.mark.parametrize("seekable", [True, False])
def test_the_seeker_is_offered_only_for_a_source_that_can_seek(seekable: bool) -> None:
    stream = MemoryStream("s") if seekable else MemoryStream("s", group="g")
    runner, _transport, _hub = make_runner(_noop, stream=stream)
    assert (runner.seeker is not None) is seekable


async def _noop(n: int) -> None:
    await trio.lowlevel.checkpoint()
