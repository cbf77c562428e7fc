"""An ack settled in line (``ack_in_line``) is the general settle where that settle sends
nothing: one test per sentence of its contract, a property test that drives a window both
ways, and the transports against a real ``redis-server``.

The sentences (``Window.consumed_in_read``, ``WindowShell.consumed_in_line``):

- an ack whose read stays incomplete joins the read's settle and closes its slot, as
  ``consumed`` does;
- the ack that completes its read is not taken in line (its settle sends the flush);
- nothing is taken in line while a flush is due;
- a delivery with a segment is not taken in line (its outcome decides the segment);
- a token with no slot is not taken in line;
- with ``pipeline=True`` nothing is taken in line;
- taken in line, the delivery is noted finished (the journal's record), as ``consumed`` notes it.
"""

from __future__ import annotations

from typing import Any

import trio
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.redis.client.redis_waits import eventually
from tests.redis.streams.support import pending_count
from tests.redis_servers import RedisServer
from tests.support import serving
from trio_streams import App, Position
from trio_streams.core.delivery import Delivery
from trio_streams.redis import RedisBroker, RedisList, RedisStream
from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.lists import processing_key
from trio_streams.redis.window import FlushPlan, Window
from trio_streams.redis.window_shell import WindowShell

from .support import calls


def plan_of(window: Window[str]) -> FlushPlan[str] | None:
    return window.take()


# ---- the window, one sentence each ---------------------------------------------------------


def test_an_ack_whose_read_stays_incomplete_joins_the_reads_settle_as_consumed_does() -> None:
    in_line: Window[str] = Window()
    general: Window[str] = Window()
    for window in (in_line, general):
        window.read(["1-0", "2-0", "3-0"])
    assert in_line.consumed_in_read("1-0") is True
    assert in_line.consumed_in_read("2-0") is True
    assert general.consumed("1-0", keep=True) is False
    assert general.consumed("2-0", keep=True) is False
    assert in_line.unsettled == general.unsettled == 1
    assert not in_line.holds("1-0") and not in_line.holds("2-0")
    assert in_line.consumed("3-0", keep=True) is general.consumed("3-0", keep=True) is True
    assert plan_of(in_line) == plan_of(general) == FlushPlan((), (("1-0", "2-0", "3-0"),))


def test_the_ack_that_completes_its_read_is_not_taken_in_line() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0"])
    assert window.consumed_in_read("1-0") is True
    assert window.consumed_in_read("2-0") is False
    assert window.holds("2-0") and window.unsettled == 1 and not window.due
    assert window.consumed("2-0", keep=True) is True
    assert plan_of(window) == FlushPlan((), (("1-0", "2-0"),))


def test_a_read_of_one_delivery_is_never_taken_in_line() -> None:
    window: Window[str] = Window()
    window.read(["1-0"])
    assert window.consumed_in_read("1-0") is False
    assert window.holds("1-0")


def test_nothing_is_taken_in_line_while_a_flush_is_due() -> None:
    window: Window[str] = Window()
    window.read(["1-0"])
    window.read(["2-0", "3-0"])
    assert window.consumed("1-0", keep=True) is True  # read 1 complete: a flush is due
    assert window.consumed_in_read("2-0") is False  # its settle must send that flush
    assert window.holds("2-0")
    assert window.consumed("2-0", keep=True) is True
    assert plan_of(window) == FlushPlan((), (("1-0",),))


def test_a_delivery_with_a_segment_is_not_taken_in_line() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0"])
    window.segment("1-0").incr("a")
    assert window.consumed_in_read("1-0") is False
    assert window.holds("1-0")
    assert window.consumed("1-0", keep=True) is False
    assert window.consumed("2-0", keep=True) is True
    plan = plan_of(window)
    assert plan is not None and [s.commands for s in plan.segments] == [(("INCR", "a"),)]


def test_a_token_with_no_slot_is_not_taken_in_line() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0"])
    assert window.consumed_in_read("9-0") is False
    assert window.consumed_in_read("1-0") is True
    assert window.consumed_in_read("1-0") is False  # its slot closed already
    assert window.unsettled == 1


# ---- the window, both ways at once ----------------------------------------------------------

# A step: ("read", n) reads n deliveries; ("ack", i) acks the i-th open slot (in line where it
# can be, else the general way); ("drop", i), ("alone", i), ("let_go", i), ("segment", i)
# decide or touch the i-th open slot the same way in both windows; ("flush",) takes a plan.
_steps = st.lists(
    st.one_of(
        st.tuples(st.just("read"), st.integers(1, 4)),
        st.tuples(
            st.sampled_from(["ack", "ack", "ack", "drop", "alone", "let_go", "segment"]),
            st.integers(0, 10),
        ),
        st.tuples(st.just("flush")),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(steps=_steps)
def test_acks_taken_in_line_where_they_can_be_send_what_the_general_way_sends(
    steps: list[tuple[Any, ...]],
) -> None:
    in_line: Window[str] = Window()
    general: Window[str] = Window()
    open_slots: list[str] = []
    counter = 0
    for step in steps:
        kind = step[0]
        if kind == "read":
            tokens = [f"{counter + n}-0" for n in range(step[1])]
            counter += step[1]
            in_line.read(tokens)
            general.read(tokens)
            open_slots += tokens
            continue
        if kind == "flush":
            assert plan_of(in_line) == plan_of(general)
            continue
        if not open_slots:
            continue
        token = open_slots[step[1] % len(open_slots)]
        if kind == "segment":
            in_line.segment(token).incr(token)
            general.segment(token).incr(token)
            continue
        open_slots.remove(token)
        if kind == "ack":
            due = general.consumed(token, keep=True)
            if not in_line.consumed_in_read(token):
                assert in_line.consumed(token, keep=True) is due
            else:
                assert due is False  # taken in line only where the general way sends nothing
        elif kind == "drop":
            assert in_line.consumed(token, keep=False) is general.consumed(token, keep=False)
        elif kind == "alone":
            assert in_line.settled_alone(token) is general.settled_alone(token)
        else:
            assert in_line.let_go(token) is general.let_go(token)
        assert in_line.due is general.due
        assert in_line.unsettled == general.unsettled
    assert plan_of(in_line) == plan_of(general)
    assert in_line.stop() == general.stop()


# ---- the shell ------------------------------------------------------------------------------


class _Settler:
    def settle_commands(self, tokens: Any) -> list[Any]:
        return [("XACK", "s", "g", *tokens)]

    def unsent(self, plan: Any, exc: Any, *, lost: bool) -> str:
        raise AssertionError("nothing is sent here")

    def interrupted(self, plan: Any) -> None:
        raise AssertionError("nothing is sent here")

    async def flushed(self, plan: Any, *, failed: bool) -> None:
        raise AssertionError("nothing is sent here")


def _delivery(token: str) -> Delivery:
    return Delivery(stream="s", payload=b"", headers={}, attempt=1, handle=token)


def _shell(*, windowed: bool) -> tuple[WindowShell[str], list[str]]:
    shell: WindowShell[str] = WindowShell(
        None, _Settler(), windowed=windowed, atomic=False, segment_check=None, chunk=100
    )
    finished: list[str] = []
    shell.finished = lambda delivery: finished.append(delivery.handle)
    return shell, finished


def test_taken_in_line_the_delivery_is_noted_finished_as_consumed_notes_it() -> None:
    shell, finished = _shell(windowed=False)
    shell.read(["1-0", "2-0"])
    assert shell.consumed_in_line(_delivery("1-0")) is True
    assert finished == ["1-0"]
    assert shell.consumed_in_line(_delivery("2-0")) is False  # it completes the read
    assert finished == ["1-0"]  # not taken: nothing noted
    assert shell.consumed(_delivery("2-0"), keep=True) is True
    assert finished == ["1-0", "2-0"]


def test_with_pipeline_true_nothing_is_taken_in_line() -> None:
    shell, finished = _shell(windowed=True)
    shell.read(["1-0", "2-0", "3-0"])
    assert shell.consumed_in_line(_delivery("1-0")) is False
    assert shell.window.holds("1-0") and finished == []


# ---- the transports, against a real server ---------------------------------------------------


async def _fill_stream(redis: RedisClient, count: int) -> None:
    pipeline = redis.pipeline()
    for n in range(1, count + 1):
        pipeline.add("XADD", "s", f"{n}-0", "_payload", str(n))
    (await pipeline.execute()).raise_first()


async def test_a_group_acknowledges_acks_taken_in_line_with_one_xack_per_read(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    await _fill_stream(redis, 250)
    await redis.execute("CONFIG", "RESETSTAT")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[int] = []
    done = trio.Event()

    @broker.subscriber(
        RedisStream("s", group="g", start=Position.beginning()), name="in-line", count=100
    )
    async def handle(n: int) -> None:  # the payload alone: the in-line path
        seen.append(n)
        if len(seen) == 250:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()

        async def none_pending() -> bool:
            return not await pending_count(redis, "s", "g")

        await eventually(none_pending, within=10, what="every entry acknowledged")
    assert sorted(seen) == list(range(1, 251))
    # Reads of 100, 100 and 50: one XACK each (what the general way sends).
    assert calls(await redis.execute("INFO", "commandstats"), "xack") == 3


async def test_a_reliable_list_removes_acks_taken_in_line_with_its_reads_flush(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    pipeline = redis.pipeline()
    for n in range(250):
        pipeline.add("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    (await pipeline.execute()).raise_first()
    await redis.execute("CONFIG", "RESETSTAT")
    app = App("svc")
    broker = app.broker(RedisBroker(redis_server.url))
    seen: list[bytes] = []
    done = trio.Event()

    @broker.subscriber(RedisList("jobs", reliable=True, consumer="c"), name="in-line", count=100)
    async def handle(body: bytes) -> None:  # the payload alone: the in-line path
        seen.append(body)
        if len(seen) == 250:
            done.set()

    async with serving(app):
        with trio.fail_after(20):
            await done.wait()

        async def none_held() -> bool:
            return not await redis.execute("LLEN", processing_key("jobs", "c"))

        await eventually(none_held, within=10, what="the processing list emptied")
    assert sorted(int(b) for b in seen) == list(range(250))
    assert await redis.execute("LLEN", "jobs") == 0
    # Every entry removed from the processing list once, by its read's flush.
    assert calls(await redis.execute("INFO", "commandstats"), "lrem") == 250
