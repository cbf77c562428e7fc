"""``ctx.pipeline``: a handler capability from the transport, checked at mount like the seeker,
and recorded by the in-process transport so ``app.test()`` can assert what was kept.

4. "ctx.pipeline (the window's per-delivery command queue) must be reachable from a handler,
checked at mount like the seeker (a handler that asks for it on a source without a window is
refused at mount with a clear error), and recorded by the in-process transport so app.test() can
assert which segments were kept and discarded."
"""

from __future__ import annotations

from pathlib import Path

import pytest
import trio
import trio.testing

from trio_streams import (
    App,
    ConfigurationError,
    Context,
    MemoryBroker,
    MemoryStream,
    Outcome,
    UnsupportedError,
    ack,
    drop,
    retry,
    retry_after,
)
from trio_streams.core.pipeline import Pipeline, Segment
from trio_streams.file import FileBroker, FileStream


def test_a_handler_that_takes_a_pipeline_is_refused_at_mount_without_a_window() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    async def total(n: int, pipeline: Pipeline) -> None: ...

    with pytest.raises(UnsupportedError, match=r"takes a Pipeline.*pipeline=True"):
        broker.subscriber(MemoryStream("s"))(total)
    broker.subscriber(MemoryStream("s"), pipeline=True)(total)  # with a window: accepted


def test_a_transport_without_a_window_says_so_at_mount(tmp_path: Path) -> None:
    app = App("svc")
    broker = app.broker(FileBroker(tmp_path / "s.ss"))

    async def total(n: int, pipeline: Pipeline) -> None: ...

    with pytest.raises(UnsupportedError, match="has none"):
        broker.subscriber(FileStream("s"))(total)
    with pytest.raises(UnsupportedError, match="pipeline"):
        broker.subscriber(FileStream("s"), pipeline=True)(total)


@pytest.mark.parametrize(
    ("options", "error"),
    [({"pipeline": "yes"}, "True or False"), ({"atomic": True}, "give pipeline=True too")],
)
def test_window_options_are_checked_at_mount(options: dict[str, object], error: str) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    with pytest.raises(ConfigurationError, match=error):
        broker.subscriber(MemoryStream("s"), **options)(_noop)  # type: ignore[arg-type]


async def test_ctx_pipeline_without_a_window_is_an_unsupported_error_to_the_handler() -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("s"), max_attempts=1)
    async def total(n: int, ctx: Context) -> None:
        ctx.pipeline.incr("n")

    async with app.test() as t:
        await t.publish("s", 1)
        [error] = t.handler(total).errors
    assert isinstance(error, UnsupportedError)
    assert "no pipeline window" in str(error)


async def test_the_outcome_decides_the_segment_ack_keeps_it_the_others_discard_it(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())
    outcomes: dict[int, Outcome] = {1: ack(), 2: drop(), 3: retry(), 4: retry_after(5)}

    @broker.subscriber(MemoryStream("orders"), pipeline=True, max_attempts=1, name="total")
    async def total(n: int, pipeline: Pipeline, ctx: Context) -> Outcome:
        pipeline.incrbyfloat(f"total:{n}", 1.5)
        ctx.pipeline.command("HSET", "seen", str(n), 1)
        assert ctx.pipeline is pipeline  # one segment per delivery
        return outcomes.get(n, ack())

    @broker.subscriber(MemoryStream("orders"), pipeline=True, name="quiet")
    async def quiet(n: int, ctx: Context) -> None:
        pass  # queues nothing: no segment

    async with app.test() as t:
        for n in (1, 2, 3, 4):
            await t.publish("orders", n)
        segments = t.segments(total)
        assert t.segments(quiet) == []
    by_payload = {s.commands[0][1]: s for s in segments}
    assert [(k, s.kept, s.decided_by) for k, s in sorted(by_payload.items())] == [
        ("total:1", True, "ack"),
        ("total:2", False, "drop"),
        ("total:3", False, "drop"),  # retry() at the cap of 1 attempt settles as drop
        ("total:4", False, "drop"),
    ]
    assert by_payload["total:1"].commands == (
        ("INCRBYFLOAT", "total:1", "1.5"),
        ("HSET", "seen", "1", "1"),
    )


async def test_a_retried_delivery_discards_its_segment_and_the_copy_gets_a_new_one(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = App("svc")
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("orders"), pipeline=True, max_attempts=3)
    async def total(n: int, ctx: Context) -> Outcome:
        ctx.pipeline.incr(f"attempt:{ctx.attempt}")
        return retry() if ctx.attempt == 1 else ack()

    async with app.test() as t:
        await t.publish("orders", 1)
        segments = t.segments(total)
    assert [(s.commands, s.kept, s.decided_by) for s in segments] == [
        ((("INCR", "attempt:1"),), False, "retry"),
        ((("INCR", "attempt:2"),), True, "ack"),
    ]


async def test_a_delivery_abandoned_at_shutdown_discards_its_segment(
    autojump_clock: trio.testing.MockClock,
) -> None:
    app = App("svc", shutdown_timeout=1)
    broker = app.broker(MemoryBroker())
    queued = trio.Event()

    @broker.subscriber(MemoryStream("orders"), pipeline=True, atomic=True, name="slow")
    async def slow(n: int, ctx: Context) -> None:
        ctx.pipeline.set("k", n)
        queued.set()
        await trio.sleep_forever()  # cancelled when the drain times out: never settled

    async with trio.open_nursery() as nursery:
        running = await nursery.start(app.serve)
        await broker.publish("orders", 1)
        with trio.fail_after(10):
            await queued.wait()
        await running.aclose()
    assert list(broker.hub.segments) == [
        Segment("slow", "orders", (("SET", "k", "1"),), kept=False, decided_by="abandoned")
    ]


def test_commands_are_recorded_never_sent_and_checked() -> None:
    pipeline = Pipeline()
    pipeline.incrby("a", 2)
    pipeline.client_setname("worker")
    pipeline.command("xadd", "s", "*", "f", b"v")
    assert pipeline.commands == (
        ("INCRBY", "a", "2"),
        ("CLIENT", "SETNAME", "worker"),
        ("XADD", "s", "*", "f", b"v"),
    )
    assert len(pipeline) == 3
    with pytest.raises(ConfigurationError, match="arguments are str, bytes, int or float"):
        pipeline.set("k", None)
    with pytest.raises(ConfigurationError, match="arguments are"):
        pipeline.set("k", True)
    with pytest.raises(ConfigurationError, match="a command name"):
        pipeline.command("", "x")
    with pytest.raises(AttributeError):
        pipeline._private  # noqa: B018
    with pytest.raises(AttributeError):
        pipeline.Set  # noqa: B018


async def _noop(n: int) -> None:
    await trio.lowlevel.checkpoint()
