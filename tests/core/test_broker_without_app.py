"""A broker without an app: ``async with MemoryBroker() as b`` / ``async with FileBroker(path) as
b`` connects, publishes and requests, and closes at the end of the block; it is one connection at
a time (entering twice, or while its app runs, is refused); subscribers are not run by it."""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import (
    App,
    ConfigurationError,
    MemoryBroker,
    MemoryStream,
    NotConnected,
    ReplyLost,
    RequestTimeout,
)
from trio_streams.core.replies import CORRELATION_HEADER, REPLY_TO_HEADER
from trio_streams.file import FileBroker, FileReader, FileStream, StreamFileNotFoundError
from trio_streams.file.envelope import open_envelope


def file_messages(path: Path) -> list[tuple[str, bytes]]:
    """Every message of the stream file at ``path``: (key, payload without its headers)."""
    found = []
    with FileReader(path) as reader:
        while batch := reader.read_messages(1000):
            found += [(m.stream_key, open_envelope(m.payload)[0]) for m in batch]
    return found


async def answer_by_hand(broker: MemoryBroker, stream: str, value: bytes) -> None:
    """Answer the request waiting in ``stream`` as a handler would (the broker runs none)."""
    [entry] = broker.hub.log(stream).slice(1, 2)
    headers = entry.headers
    await broker.send_reply(
        headers[REPLY_TO_HEADER], value, {CORRELATION_HEADER: headers[CORRELATION_HEADER]}
    )


async def test_async_with_memory_broker_connects_publishes_requests_and_closes() -> None:
    broker = MemoryBroker()
    with trio.fail_after(10):
        async with broker as entered:
            assert entered is broker
            await broker.publish("events", {"n": 1})
            assert [e.payload for e in broker.hub.log("events").slice(1, 2)] == [b'{"n":1}']

            async def responder() -> None:
                await trio.testing.wait_all_tasks_blocked()  # the request is published
                await answer_by_hand(broker, "questions", b"42")

            async with trio.open_nursery() as nursery:
                nursery.start_soon(responder)
                assert await broker.request("why?", "questions", reply_type=int) == 42
            assert broker.requests_in_flight == 0
    with pytest.raises(NotConnected):
        await broker.publish("events", {"n": 2})


async def test_async_with_file_broker_connects_publishes_requests_and_closes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    app = App("pricing")
    served = app.broker(FileBroker(path))

    @served.subscriber(FileStream("quotes"))
    async def price(qty: int) -> float:
        return qty * 2.5

    with trio.fail_after(20):
        async with serving(app), FileBroker(path) as broker:
            await broker.publish("events", {"n": 1})
            assert await broker.request(4, "quotes", reply_type=float) == 10.0
    assert ("events", b'{"n":1}') in file_messages(path)
    with pytest.raises(NotConnected):
        await broker.publish("events", {"n": 2})


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_entering_a_broker_twice_is_refused(kind: str, tmp_path: Path) -> None:
    broker = MemoryBroker() if kind == "memory" else FileBroker(tmp_path / "x.ss")
    async with broker:
        with pytest.raises(ConfigurationError, match="already connected"):
            async with broker:
                pytest.fail("entered twice")
        await broker.publish("s", 1)  # the first connection is still the broker's


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_entering_a_broker_twice_at_once_is_refused(kind: str, tmp_path: Path) -> None:
    broker = MemoryBroker() if kind == "memory" else FileBroker(tmp_path / "x.ss")
    refused: list[BaseException] = []
    inside = 0
    release = trio.Event()

    async def enter() -> None:
        nonlocal inside
        try:
            async with broker:
                inside += 1
                await release.wait()
        except ConfigurationError as exc:
            refused.append(exc)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(enter)
            nursery.start_soon(enter)
            await trio.testing.wait_all_tasks_blocked()
            assert (inside, len(refused)) == (1, 1)
            release.set()


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_entering_a_broker_while_its_app_runs_is_refused(kind: str, tmp_path: Path) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker() if kind == "memory" else FileBroker(tmp_path / "x.ss"))
    async with serving(app):
        with pytest.raises(ConfigurationError, match="its app is running, or it was entered"):
            async with broker:
                pytest.fail("entered while its app runs")
        await broker.publish("s", 1)  # the app's connection is untouched
    async with app.test():
        with pytest.raises(ConfigurationError, match="already connected"):
            async with broker:
                pytest.fail("entered under app.test()")


async def test_running_the_app_of_an_entered_broker_is_refused() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    async with broker, trio.open_nursery() as nursery:
        with pytest.raises(ConfigurationError, match="already connected"):
            await nursery.start(app.serve)
        await broker.publish("s", 1)


@pytest.mark.parametrize("kind", ["memory", "file"])
async def test_after_exit_the_broker_says_to_enter_or_run(kind: str, tmp_path: Path) -> None:
    broker = MemoryBroker() if kind == "memory" else FileBroker(tmp_path / "x.ss")
    async with broker:
        await broker.publish("s", 1)
    for attempt in (broker.publish("s", 2), broker.request(2, "s")):
        with pytest.raises(NotConnected) as refused:
            await attempt
        message = str(refused.value)
        assert "run its app" in message
        assert "async with broker" in message
    async with broker:  # and it may be entered again
        await broker.publish("s", 3)


async def test_subscribers_are_not_run_by_async_with(autojump_clock: trio.abc.Clock) -> None:
    broker = MemoryBroker()
    called: list[int] = []

    @broker.subscriber(MemoryStream("jobs"))
    async def job(n: int) -> int:
        called.append(n)
        return n

    async with broker:
        await broker.publish("jobs", 1)
        with pytest.raises(RequestTimeout):
            await broker.request(2, "jobs", timeout=5)
    assert called == []


async def test_an_error_inside_the_block_leaves_as_itself() -> None:
    with pytest.raises(RequestTimeout):
        async with MemoryBroker() as broker:
            await broker.request(1, "nobody", timeout=0.01)
    with pytest.raises(KeyError):
        async with MemoryBroker():
            raise KeyError("mine")


async def test_a_request_waiting_when_the_block_ends_fails_with_reply_lost() -> None:
    lost: list[ReplyLost] = []

    async def ask(broker: MemoryBroker) -> None:
        with pytest.raises(ReplyLost) as failed:
            await broker.request(1, "nobody", timeout=600)
        lost.append(failed.value)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery, MemoryBroker() as broker:
            nursery.start_soon(ask, broker)
            await trio.testing.wait_all_tasks_blocked()
    assert len(lost) == 1


async def test_a_broker_that_fails_to_connect_can_be_entered_once_it_can(tmp_path: Path) -> None:
    path = tmp_path / "later.ss"
    broker = FileBroker(path, existing_only=True)
    with pytest.raises(StreamFileNotFoundError, match="existing_only"):
        async with broker:
            pytest.fail("connected to a file that is not there")
    async with FileBroker(path) as writer:
        await writer.publish("s", 1)  # creates the file
    async with broker:
        await broker.publish("s", 2)
    assert [key for key, _ in file_messages(path)] == ["s", "s"]
