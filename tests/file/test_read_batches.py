"""A stream-file replay queues each read whole and hands a handler of the payload alone its plain
messages without a delivery; every promise of the delivery path holds there: order, a seek
purging what was not started, headers and retry copies in the middle of a read, failures
retried and dead-lettered at the attempts cap, returned outcomes, shutdown abandoning what
is in hand, and a durable consumer's watermark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from trio_streams import App, Context, Position, retry
from trio_streams.core.delivery import Delivery, ReadBatch, SequenceDelivery
from trio_streams.core.driver import Seeker
from trio_streams.core.transport import Unsettled
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.broker import FileSubscription
from trio_streams.file.envelope import open_envelope
from trio_streams.file.reader import FileReader

from ..support import serving
from .apps import replay_app, run_to_end, write_numbers


@pytest.fixture
def unsettled(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, Unsettled]]:
    """Every delivery the core lets go of unsettled, by sequence number, in order."""
    reported: list[tuple[int, Unsettled]] = []

    def record(self: FileSubscription, delivery: Delivery, why: Unsettled) -> None:
        assert isinstance(delivery, SequenceDelivery)
        reported.append((delivery.seq, why))

    monkeypatch.setattr(FileSubscription, "unsettled", record, raising=False)
    return reported


def payloads(path: Path, key: str) -> list[bytes]:
    """The payloads of ``key``'s messages, out of their envelopes."""
    with FileReader(path, keys=[key]) as reader:
        return [open_envelope(message.payload)[0] for message in reader]


async def test_a_replay_reads_in_batches_and_handles_every_message_in_order(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    write_numbers(path, 300)
    seen: list[bytes] = []
    batches: list[int] = []
    poll = FileSubscription.poll

    def polled(self: FileSubscription) -> Any:
        batch = poll(self)
        if batch:
            assert type(batch) is ReadBatch  # no durable consumer: queued whole
            batches.append(len(batch))
        return batch

    async def handle(payload: bytes) -> None:
        seen.append(payload)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FileSubscription, "poll", polled)
        await run_to_end(replay_app(path, handle, buffer=64, count=64)[0])
    assert seen == [str(n).encode() for n in range(1, 301)]
    assert sum(batches) == 300


async def test_a_seek_purges_exactly_the_messages_of_a_read_not_yet_started(
    tmp_path: Path, unsettled: list[tuple[int, Unsettled]]
) -> None:
    path = tmp_path / "f.ss"
    write_numbers(path, 300)
    seen: list[int] = []
    waiting, go = trio.Event(), trio.Event()

    async def handle(payload: bytes) -> None:
        seen.append(int(payload))
        if payload == b"5" and not go.is_set():
            waiting.set()
            await go.wait()

    app, _ = replay_app(path, handle, buffer=64, count=64)
    with trio.fail_after(30):
        async with serving(app) as running:
            await waiting.wait()
            await trio.testing.wait_all_tasks_blocked()  # the driver refilled what it could
            runner = running._runners[0]
            queued = runner.channel.queued
            await Seeker(runner.driver).seek(Position.sequence(100))
            go.set()
            await running.wait_stopped()
    assert seen == [*range(1, 6), *range(100, 301)]
    purged = [seq for seq, why in unsettled if why is Unsettled.PURGED]
    assert purged == list(range(6, 6 + queued))  # the rest of what was queued, each once
    assert runner.channel.stale_count == queued


async def test_messages_with_headers_are_handled_in_their_place_as_deliveries(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    writing = App("writer")
    writer = writing.broker(FileBroker(path))
    async with serving(writing):
        for n in range(200):
            await writer.publish("s", str(n).encode(), headers={"n": str(n)} if n % 3 else None)
    app = App("svc")
    broker = app.broker(FileBroker(path, existing_only=True))
    plain: list[bytes] = []
    seen: list[tuple[bytes, dict[str, str]]] = []

    @broker.subscriber(FileStream("s").replay(), name="alone")
    async def alone(payload: bytes) -> None:
        plain.append(payload)

    @broker.subscriber(FileStream("s").replay(), name="full")
    async def full(payload: bytes, ctx: Context) -> None:
        seen.append((payload, dict(ctx.headers)))

    await run_to_end(app)
    expected = [str(n).encode() for n in range(200)]
    assert plain == expected  # the payload-alone handler, plain and enveloped messages mixed
    assert [payload for payload, _ in seen] == expected  # the same, as deliveries
    assert [headers.get("n") for _, headers in seen] == [
        str(n) if n % 3 else None for n in range(200)
    ]


async def test_a_failing_message_is_retried_then_dead_lettered_at_the_attempts_cap(
    tmp_path: Path,
) -> None:
    path = tmp_path / "f.ss"
    write_numbers(path, 20)
    seen: list[int] = []
    app = App("svc")
    broker = app.broker(FileBroker(path))

    @broker.subscriber(FileStream("s").replay(), max_attempts=3, dead_letter="dead")
    async def handle(payload: bytes) -> None:
        seen.append(int(payload))
        if payload in (b"3", b"17"):
            raise ValueError("no")

    await run_to_end(app)
    assert seen[:20] == [*range(1, 21)]
    assert sorted(seen[20:]) == [3, 3, 17, 17]  # the retry copies, each twice
    assert sorted(payloads(path, "dead")) == [b"17", b"3"]


async def test_an_outcome_a_payload_alone_handler_returns_is_concluded(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    write_numbers(path, 10)
    seen: list[int] = []

    async def handle(payload: bytes) -> Any:
        seen.append(int(payload))
        return retry() if payload == b"4" and seen.count(4) == 1 else None

    await run_to_end(replay_app(path, handle)[0])
    assert seen == [*range(1, 11), 4]


async def test_shutdown_abandons_the_message_in_hand_and_reports_each_queued_one_once(
    tmp_path: Path, unsettled: list[tuple[int, Unsettled]]
) -> None:
    path = tmp_path / "f.ss"
    write_numbers(path, 200)
    seen: list[int] = []
    stuck = trio.Event()

    async def handle(payload: bytes) -> None:
        seen.append(int(payload))
        if payload == b"6":
            stuck.set()
            await trio.sleep_forever()

    app, _ = replay_app(path, handle, buffer=64, count=64)
    app.shutdown_timeout = 0.5
    with trio.fail_after(30):
        async with serving(app):
            await stuck.wait()
    assert seen[:6] == [1, 2, 3, 4, 5, 6]
    reported = [seq for seq, _ in unsettled]
    assert len(reported) == len(set(reported))  # each once
    assert (6, Unsettled.ABANDONED) in unsettled
    assert not set(reported) & set(seen[:5])  # none of those handled
    handled_after = set(seen[6:])
    assert not handled_after & set(reported)


async def test_a_durable_consumer_still_gets_deliveries_and_its_watermark(tmp_path: Path) -> None:
    path = tmp_path / "f.ss"
    write_numbers(path, 50)
    seen: list[int] = []
    polled: list[type] = []
    poll = FileSubscription.poll

    def watch(self: FileSubscription) -> Any:
        batch = poll(self)
        if batch:
            polled.append(type(batch))
        return batch

    async def handle(payload: bytes) -> None:
        seen.append(int(payload))

    stream = FileStream("s", durable="c").replay()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(FileSubscription, "poll", watch)
        await run_to_end(replay_app(path, handle, stream=stream)[0])
        assert seen == list(range(1, 51)) and set(polled) == {list}
        seen.clear()
        write_numbers(path, 5, first=51)
        await run_to_end(replay_app(path, handle, stream=stream)[0])
    assert seen == list(range(51, 56))  # resumed after the watermark
