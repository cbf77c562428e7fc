"""A stream-file consumer group under ``app.test()`` (the in-process group of that name) has the
outcomes and refusals of the real one: each test body runs twice, on a real file served with
``app.serve`` and under ``app.test()``."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from trio_streams import (
    RETRY_COUNT_HEADER,
    App,
    ConfigurationError,
    Context,
    Outcome,
    Position,
    SeekRefused,
    ack,
    drop,
    retry,
    retry_after,
)
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.envelope import open_envelope
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter
from trio_streams.testing import TestClient

from ..support import serving

#: How long a test waits for what it expects before it fails.
WITHIN = 10


class Run:
    """One way of running the test's app: ``"file"`` (``app.serve`` on a real file) or
    ``"app.test"`` (the same app in process)."""

    def __init__(self, mode: str, tmp_path: Path) -> None:
        self.mode = mode
        self.path = tmp_path / "shop.ss"
        self._client: TestClient | None = None
        self._broker: FileBroker | None = None

    def app(self) -> tuple[App, FileBroker]:
        app = App("shop")
        self._broker = app.broker(FileBroker(self.path))
        return app, self._broker

    @asynccontextmanager
    async def serving(self, app: App, *, create: bool = True) -> AsyncIterator[None]:
        if self.mode == "file":
            if create:  # the file exists before the members start
                StreamWriter(self.path).close()
            async with serving(app):
                yield
        else:
            async with app.test() as client:
                self._client = client
                yield

    async def publish(self, key: str, value: Any, headers: Mapping[str, str] | None = None) -> None:
        if self._client is not None:
            await self._client.publish(key, value, headers=headers)
        else:
            assert self._broker is not None
            await self._broker.publish(key, value, headers=headers)

    def written(self, key: str) -> list[tuple[bytes, dict[str, str]]]:
        """What was published to ``key``, as (payload, headers)."""
        if self._client is not None:
            return [(m.payload, dict(m.headers)) for m in self._client.published(key)]
        with FileReader(self.path, keys=[key]) as reader:
            return [
                (payload, dict(headers))
                for payload, headers in (open_envelope(message[4]) for message in reader)
            ]


@pytest.fixture(params=["file", "app.test"])
def run(request: pytest.FixtureRequest, tmp_path: Path) -> Run:
    return Run(request.param, tmp_path)


async def wait(event: trio.Event) -> None:
    with trio.fail_after(WITHIN):
        await event.wait()


# ---- where a new group starts ----------------------------------------------------------------


async def test_a_live_member_started_before_the_file_exists_gets_what_is_published_after(
    run: Run,
) -> None:
    app, broker = run.app()
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders").group("billing"))
    async def bill(n: int) -> None:
        seen.append(n)
        if n == 2:
            done.set()

    async with run.serving(app, create=False):  # the first publish creates the file
        await run.publish("orders", 1)
        await run.publish("orders", 2)
        await wait(done)
    assert seen == [1, 2]


# ---- outcomes --------------------------------------------------------------------------------


async def test_ack_and_drop_settle_each_message_after_one_run(run: Run) -> None:
    app, broker = run.app()
    seen: list[tuple[int, int]] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders").group("billing"))
    async def bill(n: int, ctx: Context) -> Outcome:
        seen.append((n, ctx.attempt))
        if n == 3:
            done.set()
        return drop() if n == 2 else ack()

    async with run.serving(app):
        for n in (1, 2, 3):
            await run.publish("orders", n)
        await wait(done)
    assert seen == [(1, 1), (2, 1), (3, 1)]


async def test_retry_runs_the_message_again_as_its_next_attempt(run: Run) -> None:
    app, broker = run.app()
    seen: list[tuple[int, int]] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders").group("billing"), max_attempts=5)
    async def bill(n: int, ctx: Context) -> Outcome:
        seen.append((n, ctx.attempt))
        if ctx.attempt < 3:
            return retry()
        done.set()
        return ack()

    async with run.serving(app):
        await run.publish("orders", 1)
        await wait(done)
    assert seen == [(1, 1), (1, 2), (1, 3)]


async def test_retry_after_runs_the_message_again_once_the_delay_passed(run: Run) -> None:
    app, broker = run.app()
    seen: list[tuple[int, int, float]] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders").group("billing"))
    async def bill(n: int, ctx: Context) -> Outcome:
        seen.append((n, ctx.attempt, trio.current_time()))
        if ctx.attempt == 1:
            return retry_after(0.3)
        done.set()
        return ack()

    async with run.serving(app):
        await run.publish("orders", 1)
        await wait(done)
    assert [(n, attempt) for n, attempt, _ in seen] == [(1, 1), (1, 2)]
    # The state keeps whole milliseconds: at most one short of the delay.
    assert seen[1][2] - seen[0][2] >= 0.299


async def test_a_failing_message_is_dead_lettered_after_max_attempts_runs(run: Run) -> None:
    app, broker = run.app()
    attempts: list[int] = []
    letters: list[dict[str, str]] = []
    dead = trio.Event()

    @broker.subscriber(
        FileStream("orders").group("billing"),
        max_attempts=3,
        dead_letter="orders.dead",
        name="bill",
    )
    async def bill(n: int, ctx: Context) -> None:
        attempts.append(ctx.attempt)
        raise ValueError(f"cannot bill {n}")

    @broker.subscriber(FileStream("orders.dead"))
    async def audit(n: int, ctx: Context) -> None:
        letters.append(dict(ctx.headers))
        dead.set()

    async with run.serving(app):
        await run.publish("orders", 7, headers={"trace-id": "t7"})
        await wait(dead)
    assert attempts == [1, 2, 3]
    [letter] = letters
    assert letter["trace-id"] == "t7"
    assert letter["x-dead-letter-reason"] == "max-attempts"
    assert letter["x-dead-letter-attempts"] == "3"
    assert letter["x-dead-letter-error"] == "ValueError: cannot bill 7"
    assert letter["x-dead-letter-subscription"] == "bill"


async def test_max_attempts_is_checked_before_the_run(run: Run) -> None:
    app, broker = run.app()
    ran: list[int] = []
    letters: list[str] = []
    dead = trio.Event()

    @broker.subscriber(
        FileStream("orders").group("billing"), max_attempts=3, dead_letter="orders.dead"
    )
    async def bill(n: int) -> None:
        ran.append(n)

    @broker.subscriber(FileStream("orders.dead"))
    async def audit(n: int, ctx: Context) -> None:
        letters.append(ctx.headers["x-dead-letter-attempts"])
        dead.set()

    async with run.serving(app):
        # Tried three times already (its handler crashed a process, say): not run a fourth.
        await run.publish("orders", 1, headers={RETRY_COUNT_HEADER: "3"})
        await wait(dead)
    assert ran == []
    assert letters == ["3"]


async def test_an_ordered_group_handles_a_retry_in_place_keeping_its_keys_order(run: Run) -> None:
    app, broker = run.app()
    seen: list[tuple[str, int, int]] = []
    done = trio.Event()

    @broker.subscriber(FileStream("a", "b").group("billing", ordered=True), workers=2)
    async def bill(n: int, ctx: Context) -> Outcome:
        seen.append((ctx.stream, n, ctx.attempt))
        if len(seen) == 5:
            done.set()
        return retry() if (ctx.stream, n, ctx.attempt) == ("a", 1, 1) else ack()

    async with run.serving(app):
        for key, n in (("a", 1), ("b", 1), ("a", 2), ("b", 2)):
            await run.publish(key, n)
        await wait(done)
    assert [(n, attempt) for key, n, attempt in seen if key == "a"] == [(1, 1), (1, 2), (2, 1)]
    assert [(n, attempt) for key, n, attempt in seen if key == "b"] == [(1, 1), (2, 1)]


# ---- seeking ---------------------------------------------------------------------------------


async def test_a_member_alone_in_its_group_seeks_and_the_group_reads_again(run: Run) -> None:
    app, broker = run.app()
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(FileStream("orders").group("billing", lease=5))
    async def bill(n: int, ctx: Context) -> None:
        seen.append(n)
        if n == 2 and seen.count(2) == 1:
            await ctx.seeker.seek(Position.sequence(1))
        elif n == 2:
            done.set()

    async with run.serving(app):
        await run.publish("orders", 1)
        await run.publish("orders", 2)
        await wait(done)
    assert seen == [1, 2, 1, 2]


async def test_a_members_seek_is_refused_while_another_member_of_its_group_is_live(
    run: Run,
) -> None:
    app, broker = run.app()
    refusals: list[str] = []
    refused = trio.Event()

    async def seek_back(n: int, ctx: Context) -> None:
        try:
            await ctx.seeker.seek(Position.beginning())
        except SeekRefused as refusal:
            refusals.append(str(refusal))
            refused.set()

    for name in ("first", "second"):  # two members of one group
        broker.subscriber(FileStream("orders").group("billing"), name=name)(seek_back)

    async with run.serving(app):
        await run.publish("orders", 1)
        await wait(refused)
    [refusal] = refusals
    assert "billing" in refusal


# ---- refusals --------------------------------------------------------------------------------


def test_a_durable_consumer_cannot_be_a_member_of_a_group() -> None:
    with pytest.raises(ConfigurationError, match="durable consumer or a member of a group"):
        FileStream("orders", durable="billing").group("billing")
    with pytest.raises(ConfigurationError, match="durable consumer or a member of a group"):
        FileStream("orders", durable=True, group="billing")


@pytest.mark.parametrize("option", [{"by_key": "k"}, {"batch": 4}], ids=["by_key", "batch"])
async def test_an_ordered_group_refuses_lanes_keyed_otherwise_and_batches_at_mount(
    run: Run, option: dict[str, Any]
) -> None:
    app, broker = run.app()

    async def bill(n: int) -> None: ...

    async def bill_batch(ns: list[int]) -> None: ...

    handler = bill_batch if "batch" in option else bill
    subscribe = broker.subscriber(FileStream("orders").group("billing", ordered=True), **option)
    with pytest.raises(ConfigurationError, match="ordered by stream key"):
        subscribe(handler)

    # Nothing was mounted: the app runs without it, in either form.
    async with run.serving(app):
        assert broker.subscriptions == []
