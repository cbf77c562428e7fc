"""Request-reply over a stream file: a live ``FileBroker`` app answers requests from another
``FileBroker`` of the same file, in this process or another; each reply is appended to a reply
key of the same file (``trio-streams.reply.<id>``), so the request and its reply are both in the
file afterwards, where the file tools and the reader list them."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from tests.support import serving
from trio_streams import (
    RETRY_COUNT_HEADER,
    App,
    Middleware,
    PublishCall,
    RemoteError,
    ReplyLost,
    RequestTimeout,
)
from trio_streams.core.replies import CORRELATION_HEADER, ERROR_HEADER, REPLY_TO_HEADER
from trio_streams.file import FileBroker, FileReader, FileStream
from trio_streams.file.envelope import open_envelope

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Quote:
    sku: str
    qty: int


@dataclass
class Price:
    sku: str
    total: float


def pricing(path: Path, **options: Any) -> App:
    """A live pricing service on the stream file at ``path``."""
    app = App("pricing", **options)
    broker = app.broker(FileBroker(path))

    @broker.subscriber(FileStream("quotes"), workers=4)
    async def price(quote: Quote) -> Price:
        if quote.qty < 0:
            raise ValueError(f"negative quantity {quote.qty}")
        await trio.sleep(quote.qty / 1000)
        return Price(quote.sku, quote.qty * 2.5)

    return app


@dataclass
class Stored:
    key: str
    seq: int
    payload: bytes
    headers: dict[str, str]


def stored(path: Path) -> list[Stored]:
    """Every message of the file, its headers opened, in file order (the reader API)."""
    found = []
    with FileReader(path) as reader:
        while batch := reader.read_messages(1000):
            for message in batch:
                payload, headers = open_envelope(message.payload)
                found.append(Stored(message.stream_key, message.seq, payload, dict(headers)))
    return found


async def test_a_live_file_broker_app_answers_a_request_from_a_second_file_broker(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    with trio.fail_after(30):
        async with serving(pricing(path)), FileBroker(path) as caller:
            reply = await caller.request(Quote("tea", 4), "quotes", timeout=20)
            assert reply.decode(Price) == Price("tea", 10.0)
            assert await caller.request(Quote("rye", 2), "quotes", reply_type=Price) == Price(
                "rye", 5.0
            )
            assert caller.requests_in_flight == 0


async def test_a_live_file_broker_app_answers_a_request_from_another_process(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    script = """
import sys
import trio
from trio_streams.file import FileBroker

async def main() -> None:
    async with FileBroker(sys.argv[1]) as broker:
        reply = await broker.request({"sku": "tea", "qty": 4}, "quotes", timeout=30)
        print(reply.text())

trio.run(main)
"""
    with trio.fail_after(60):
        async with serving(pricing(path)):
            done = await trio.run_process(
                [sys.executable, "-c", script, str(path)],
                cwd=ROOT,
                capture_stdout=True,
                capture_stderr=True,
                check=False,
            )
    assert done.returncode == 0, done.stderr.decode()
    assert json.loads(done.stdout) == {"sku": "tea", "total": 10.0}


async def test_the_request_and_its_reply_are_both_in_the_file_afterwards(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    with trio.fail_after(30):
        async with serving(pricing(path)), FileBroker(path) as caller:
            reply = await caller.request(Quote("tea", 4), "quotes", headers={"x-tenant": "acme"})
            with pytest.raises(RemoteError, match="negative quantity -1"):
                await caller.request(Quote("tea", -1), "quotes")

    messages = stored(path)
    # The two requests, then the two retry copies of the failing one (the file keeps all).
    [ok, failed, *copies] = [m for m in messages if m.key == "quotes"]
    assert [c.headers[RETRY_COUNT_HEADER] for c in copies] == ["1", "2"]
    assert ok.headers["x-tenant"] == "acme"
    assert ok.headers[CORRELATION_HEADER] == reply.correlation_id
    reply_key = ok.headers[REPLY_TO_HEADER]
    assert reply_key.startswith("trio-streams.reply.")
    answers = [m for m in messages if m.key == reply_key]
    assert [a.headers[CORRELATION_HEADER] for a in answers] == [
        ok.headers[CORRELATION_HEADER],
        failed.headers[CORRELATION_HEADER],
    ]
    assert answers[0].payload == reply.payload
    assert answers[1].headers[ERROR_HEADER] == "max-attempts"
    assert json.loads(answers[1].payload)["type"] == "ValueError"

    # The file tools list them as well: the request, then its reply on the reply key.
    decoded = await tool("decode", path)
    assert reply.correlation_id in decoded
    assert reply_key in decoded
    stat = await tool("stat", path)
    assert "quotes" in stat
    assert reply_key in stat


async def tool(command: str, path: Path) -> str:
    """What ``trio-streams file <command> <path>`` prints."""
    with trio.fail_after(60):
        done = await trio.run_process(
            [sys.executable, "-m", "trio_streams", "file", command, str(path)],
            cwd=ROOT,
            capture_stdout=True,
        )
    return done.stdout.decode()


async def test_a_request_made_before_the_file_exists_is_answered(tmp_path: Path) -> None:
    """The service waits for the file and the caller's reply inbox too: the request itself
    creates it."""
    path = tmp_path / "new.ss"
    with trio.fail_after(30):
        async with serving(pricing(path)), FileBroker(path) as caller:
            assert not path.exists()
            assert await caller.request(Quote("oat", 2), "quotes", reply_type=Price) == Price(
                "oat", 5.0
            )


async def test_requests_from_several_callers_each_get_their_own_reply(tmp_path: Path) -> None:
    path = tmp_path / "shop.ss"
    got: dict[tuple[int, int], Price] = {}

    async def ask(caller: FileBroker, who: int, n: int) -> None:
        got[who, n] = await caller.request(Quote(f"{who}", n), "quotes", reply_type=Price)

    with trio.fail_after(60):
        async with (
            serving(pricing(path)),
            FileBroker(path) as first,
            FileBroker(path) as second,
            trio.open_nursery() as nursery,
        ):
            for n in range(20):
                nursery.start_soon(ask, first, 1, n)
                nursery.start_soon(ask, second, 2, n)
    assert got == {(w, n): Price(f"{w}", n * 2.5) for w in (1, 2) for n in range(20)}


async def test_the_responder_shutting_down_leaves_each_file_request_answered_or_timed_out(
    tmp_path: Path,
) -> None:
    """A service stopping while requests wait in its handlers: the one it finishes in the
    drain is answered; the one the drain gives up on times out at its timeout (the caller's
    connection to the file is still open, so nothing fails it sooner), and none waits longer."""
    path = tmp_path / "shop.ss"
    app = App("slow", shutdown_timeout=0.5)
    broker = app.broker(FileBroker(path))
    stopping = trio.Event()
    entered = {1: trio.Event(), 2: trio.Event()}

    @app.on_shutdown
    def stop() -> None:
        stopping.set()

    @broker.subscriber(FileStream("jobs"), workers=2)
    async def job(n: int) -> int:
        entered[n].set()
        if n == 2:
            await trio.sleep_forever()  # the drain gives up on it
        await stopping.wait()  # finished in the drain
        return n

    outcomes: dict[int, Any] = {}
    timeout = 2

    async def ask(caller: FileBroker, n: int) -> None:
        begun = trio.current_time()
        try:
            outcomes[n] = await caller.request(n, "jobs", timeout=timeout, reply_type=int)
        except (RequestTimeout, ReplyLost) as exc:
            outcomes[n] = type(exc)
        assert trio.current_time() - begun < timeout + 2

    with trio.fail_after(30):
        async with FileBroker(path) as caller, trio.open_nursery() as callers, serving(app):
            for n in (1, 2):
                callers.start_soon(ask, caller, n)
            for event in entered.values():
                await event.wait()
            # The service has stopped; the caller waits on for the one it gave up on.
    assert outcomes == {1: 1, 2: RequestTimeout}


async def test_the_callers_file_broker_closing_fails_its_waiting_requests_at_once(
    tmp_path: Path,
) -> None:
    path = tmp_path / "shop.ss"
    published = Published()
    lost: list[ReplyLost] = []

    async def ask(caller: FileBroker) -> None:
        with pytest.raises(ReplyLost) as failed:
            await caller.request(Quote("tea", 1), "nobody", timeout=600)
        lost.append(failed.value)

    with trio.fail_after(20):  # not the request's 600 s
        async with (
            trio.open_nursery() as nursery,
            FileBroker(path, middlewares=[published]) as caller,
        ):
            nursery.start_soon(ask, caller)
            await published.done.wait()  # the request is in the file, waiting
            assert caller.requests_in_flight == 1
    assert len(lost) == 1
    assert [m.key for m in stored(path)] == ["nobody"]


class Published(Middleware):
    """Sets ``done`` once a publish has returned."""

    def __init__(self) -> None:
        self.done = trio.Event()

    @asynccontextmanager
    async def publish(self, call: PublishCall) -> AsyncIterator[None]:
        yield
        self.done.set()
