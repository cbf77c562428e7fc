"""The pipeline window's rules, checked on the pure state machine (no server).

Each test is named after a sentence of the window's contract; the property test drives random
reads, outcomes, abandonments and flush points and checks what every plan sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trio_streams.core.pipeline import Command, Pipeline
from trio_streams.redis.window import FlushPlan, Window, plan_items


def xack(ids: Sequence[str]) -> list[Command]:
    return [("XACK", "s", "g", *ids)]


def sent(plan: FlushPlan[str] | None) -> list[Command | list[Command]]:
    assert plan is not None
    return plan_items(plan, settle=xack)


# ---- one sentence each --------------------------------------------------------------------


def test_each_delivery_of_one_read_takes_a_slot() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0", "3-0"])
    assert window.unsettled == 3
    assert all(window.holds(t) for t in ("1-0", "2-0", "3-0"))
    with pytest.raises(ValueError, match="already open"):
        window.read(["2-0"])


def test_the_segment_is_opened_at_the_first_command() -> None:
    opened: list[Pipeline] = []

    def new() -> Pipeline:
        opened.append(Pipeline())
        return opened[-1]

    window: Window[str] = Window(new)
    window.read(["1-0", "2-0"])
    assert opened == []
    window.segment("1-0").incr("a")
    window.segment("1-0").incr("b")
    assert len(opened) == 1  # the same segment for every command of the delivery
    assert window.consumed("2-0", keep=True) is False  # no commands: nothing kept
    assert window.consumed("1-0", keep=True) is True
    assert sent(window.take()) == [("INCR", "a"), ("INCR", "b"), ("XACK", "s", "g", "2-0", "1-0")]


def test_ack_keeps_the_segment_drop_retry_and_retry_after_discard_it() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0", "3-0", "4-0"])
    for token in ("1-0", "2-0", "3-0", "4-0"):
        window.segment(token).incr(f"n:{token}")
    window.consumed("1-0", keep=True)  # ack
    window.consumed("2-0", keep=False)  # drop
    window.settled_alone("3-0")  # retry: a copy and its own XACK, sent at once
    window.settled_alone("4-0")  # retry_after: the durable schedule, sent at once
    assert sent(window.take()) == [("INCR", "n:1-0"), ("XACK", "s", "g", "1-0", "2-0")]
    assert (window.kept_segments, window.discarded_segments) == (1, 3)


def test_a_delivery_that_ends_unsettled_sends_no_settle_and_discards_its_segment() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0"])
    window.segment("1-0").incr("a")
    window.segment("2-0").incr("b")
    window.consumed("2-0", keep=True)
    assert window.let_go("1-0") is True  # abandoned: the read is complete without it
    assert sent(window.take()) == [("INCR", "b"), ("XACK", "s", "g", "2-0")]
    assert window.let_go("1-0") is False  # already gone: ignored


def test_the_window_flushes_when_the_settled_deliveries_reach_the_reads_count() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0", "3-0"])
    assert window.consumed("1-0", keep=True) is False
    assert window.consumed("2-0", keep=True) is False
    assert window.take() is None  # not due: the read has an unsettled delivery
    assert window.consumed("3-0", keep=True) is True
    assert window.due


def test_the_window_flushes_when_no_unsettled_delivery_remains() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0"])
    window.consumed("1-0", keep=True)
    assert window.let_go("2-0") is True
    assert window.unsettled == 0
    assert sent(window.take()) == [("XACK", "s", "g", "1-0")]


def test_the_window_flushes_when_the_subscription_stops() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0"])
    window.segment("1-0").incr("a")
    window.consumed("1-0", keep=True)
    assert window.take() is None
    assert sent(window.stop()) == [("INCR", "a"), ("XACK", "s", "g", "1-0")]
    assert window.holds("2-0")  # undecided: it stays pending
    assert window.stop() is None


def test_a_flush_sends_the_kept_segments_in_commit_order_then_the_reads_settles() -> None:
    # The contract's example: 1-0, 2-0, 3-0 each queue an INCR and 2-0 is dropped.
    window: Window[str] = Window()
    window.read(["1-0", "2-0", "3-0"])
    for token in ("1-0", "2-0", "3-0"):
        window.segment(token).incr(f"n:{token}")
    window.consumed("3-0", keep=True)  # committed first
    window.consumed("2-0", keep=False)
    window.consumed("1-0", keep=True)
    assert sent(window.take()) == [
        ("INCR", "n:3-0"),
        ("INCR", "n:1-0"),
        ("XACK", "s", "g", "3-0", "2-0", "1-0"),
    ]


def test_a_streams_settles_are_one_xack_of_all_the_reads_ids() -> None:
    window: Window[str] = Window()
    window.read([f"{n}-0" for n in range(1, 101)])
    for n in range(1, 101):
        window.consumed(f"{n}-0", keep=n % 2 == 0)
    items = sent(window.take())
    assert items == [("XACK", "s", "g", *(f"{n}-0" for n in range(1, 101)))]


def test_each_read_is_settled_by_its_own_xack_in_the_same_flush() -> None:
    window: Window[str] = Window()
    window.read(["1-0", "2-0"])
    window.read(["3-0"])
    window.consumed("3-0", keep=True)  # the second read completes first
    window.consumed("1-0", keep=True)
    window.consumed("2-0", keep=True)
    assert sent(window.take()) == [("XACK", "s", "g", "3-0"), ("XACK", "s", "g", "1-0", "2-0")]


def test_atomic_wraps_each_segment_with_the_deliverys_own_settle() -> None:
    window: Window[str] = Window(atomic=True)
    window.read(["1-0", "2-0", "3-0"])
    for token in ("1-0", "2-0", "3-0"):
        window.segment(token).incr(f"n:{token}")
    window.consumed("1-0", keep=True)
    window.consumed("2-0", keep=False)
    window.consumed("3-0", keep=True)
    assert sent(window.take()) == [
        [("INCR", "n:1-0"), ("XACK", "s", "g", "1-0")],
        [("INCR", "n:3-0"), ("XACK", "s", "g", "3-0")],
        ("XACK", "s", "g", "2-0"),  # no segment kept: the read's one XACK
    ]


def test_a_settle_of_several_commands_travels_as_one_transaction() -> None:
    window: Window[str] = Window()
    window.read(["1-0"])
    window.consumed("1-0", keep=True)
    plan = window.take()
    assert plan is not None
    items = plan_items(plan, settle=lambda ids: [("XACK", "s", "g", *ids), ("XDEL", "s", *ids)])
    assert items == [[("XACK", "s", "g", "1-0"), ("XDEL", "s", "1-0")]]


def test_settles_are_cut_in_chunks() -> None:
    window: Window[str] = Window()
    tokens = [f"{n}-0" for n in range(5)]
    window.read(tokens)
    for token in tokens:
        window.consumed(token, keep=True)
    plan = window.take()
    assert plan is not None
    assert plan_items(plan, settle=xack, chunk=2) == [
        ("XACK", "s", "g", "0-0", "1-0"),
        ("XACK", "s", "g", "2-0", "3-0"),
        ("XACK", "s", "g", "4-0"),
    ]


def test_a_retry_held_in_an_ordered_lane_discards_its_segment_when_the_handler_decided() -> None:
    window: Window[str] = Window()
    window.read(["1-0"])
    window.segment("1-0").incr("first attempt")
    window.decide_segment("1-0", keep=False)  # retry in place: the slot stays open
    assert window.holds("1-0")
    window.segment("1-0").incr("second attempt")
    window.consumed("1-0", keep=True)
    assert sent(window.take()) == [("INCR", "second attempt"), ("XACK", "s", "g", "1-0")]


def test_a_segments_check_refuses_a_command_at_the_call() -> None:
    def refuse(command: Command) -> None:
        if command[0] == "DEL":
            raise ValueError("no DEL here")

    window: Window[str] = Window(lambda: Pipeline(refuse))
    window.read(["1-0"])
    window.segment("1-0").incr("a")
    with pytest.raises(ValueError, match="no DEL"):
        window.segment("1-0").command("DEL", "a")
    window.consumed("1-0", keep=True)
    assert sent(window.take()) == [("INCR", "a"), ("XACK", "s", "g", "1-0")]


# ---- the property: random reads, outcomes, abandonments and flush points ----------------------


@dataclass
class _Run:
    """What the random run did, to compare with what the plans sent."""

    committed: list[str] = field(default_factory=list)  # kept segments, in commit order
    consumed: set[str] = field(default_factory=set)
    alone: set[str] = field(default_factory=set)
    let_go: set[str] = field(default_factory=set)
    discarded: set[str] = field(default_factory=set)


_ACTIONS = st.sampled_from(["ack", "ack-empty", "drop", "retry", "lane-retry-then-ack", "let-go"])


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(
    reads=st.lists(st.integers(min_value=1, max_value=6), min_size=1, max_size=8),
    atomic=st.booleans(),
    data=st.data(),
)
def test_every_kept_segment_is_sent_once_in_commit_order_before_its_settle(
    reads: list[int], atomic: bool, data: st.DataObject
) -> None:
    window: Window[str] = Window(atomic=atomic)
    run = _Run()
    undecided: list[str] = []
    sends: list[Command | list[Command]] = []
    read_of: dict[str, int] = {}
    for r, size in enumerate(reads):
        tokens = [f"{r}-{i}" for i in range(size)]
        read_of.update(dict.fromkeys(tokens, r))
        window.read(tokens)
        undecided.extend(tokens)
        # Decide some of what is open, in a random order, flushing where a flush is due (or
        # at random moments: a flush that is not due sends nothing).
        while undecided:
            if not data.draw(st.booleans(), label="decide now"):
                break
            token = undecided.pop(data.draw(st.integers(0, len(undecided) - 1), label="which"))
            due = _decide(window, run, token, data.draw(_ACTIONS, label="outcome"))
            if due or data.draw(st.booleans(), label="flush anyway"):
                plan = window.take()
                assert (plan is None) == (not due)
                if plan is not None:
                    sends.extend(sent(plan))
    while undecided:
        token = undecided.pop(data.draw(st.integers(0, len(undecided) - 1), label="which"))
        if _decide(window, run, token, data.draw(_ACTIONS, label="outcome")):
            sends.extend(sent(window.take()))
    # Every read is complete and every due flush was taken: nothing decided is left for stop.
    assert window.stop() is None

    # Every kept segment sent exactly once, in commit order; nothing for a discarded one.
    segment_order = [
        cmd[1]
        for item in sends
        for cmd in (item if isinstance(item, list) else [item])
        if cmd[0] == "INCR"
    ]
    assert segment_order == run.committed
    # Every ack and drop settled exactly once; nothing else settled.
    settled = [
        t
        for item in sends
        for cmd in (item if isinstance(item, list) else [item])
        if cmd[0] == "XACK"
        for t in cmd[3:]
    ]
    assert sorted(settled) == sorted(run.consumed)
    assert not (set(settled) & (run.alone | run.let_go))
    # A segment before (or with) its own settle.
    flat = [cmd for item in sends for cmd in (item if isinstance(item, list) else [item])]
    for token in run.committed:
        at = next(i for i, c in enumerate(flat) if c[0] == "INCR" and c[1] == token)
        ack = next(i for i, c in enumerate(flat) if c[0] == "XACK" and token in c[3:])
        assert at < ack
    # Under atomic, each kept segment is one transaction with its own XACK and nothing else.
    if atomic:
        for item in sends:
            if isinstance(item, list):
                assert item[-1] == ("XACK", "s", "g", item[0][1])
    # One settle per read: a read's consumed tokens (outside atomic segments) in one XACK.
    for item in sends:
        if not isinstance(item, list) and item[0] == "XACK":
            assert len({read_of[str(t)] for t in item[3:]}) == 1
    assert window.unsettled == 0


def _decide(window: Window[str], run: _Run, token: str, action: str) -> bool:
    if action in ("ack", "drop", "retry", "lane-retry-then-ack", "let-go"):
        window.segment(token).incr(token)
    if action == "ack":
        run.committed.append(token)
        run.consumed.add(token)
        return window.consumed(token, keep=True)
    if action == "ack-empty":
        run.consumed.add(token)
        return window.consumed(token, keep=True)
    if action == "drop":
        run.consumed.add(token)
        return window.consumed(token, keep=False)
    if action == "retry":
        run.alone.add(token)
        return window.settled_alone(token)
    if action == "lane-retry-then-ack":
        window.decide_segment(token, keep=False)
        window.segment(token).incr(token)
        run.committed.append(token)
        run.consumed.add(token)
        return window.consumed(token, keep=True)
    run.let_go.add(token)
    return window.let_go(token)
