"""The ledger: one append-only file of what was published, run and settled, and its checker.

Each test is a sentence of the contract (trio_streams/testing/faults/ledger.py and
docs/guides/testing-under-faults.md, "The ledger"); the checks are shown to fail by histories
built by hand that have each defect.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path

import pytest
import trio

from trio_streams import App, Context, MemoryBroker, MemoryStream, Outcome, retry
from trio_streams.core.delivery import Delivery
from trio_streams.testing.faults import (
    MAX_LINE,
    Ledger,
    LedgerError,
    LedgerReport,
    OrderBreak,
    ledger_middleware,
)


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    with Ledger(tmp_path / "ledger.jsonl") as opened:
        yield opened


def records(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_bytes().splitlines()]


def handled_once(ledger: Ledger, *ids: int | str) -> None:
    for ident in ids:
        ledger.run_began(ident, 1)
        ledger.run_ended(ident, "ack")
        ledger.settled(ident, "ack")


# ---- "Producers record what they published, handlers what they ran (a run begins / ends),
# settles what they settled: one append-only file, each record one line."


def test_every_record_is_one_line_of_json_appended_in_the_order_written(ledger: Ledger) -> None:
    ledger.published(1, lane="k")
    ledger.run_began(1, 1)
    ledger.run_ended(1, "ack")
    ledger.settled(1, "ack")
    ledger.effect(1)
    written = records(ledger.path)
    assert [r["t"] for r in written] == ["published", "run", "ended", "settled", "effect"]
    assert all(r["id"] == 1 and r["pid"] == os.getpid() for r in written)
    assert written[0]["lane"] == "k" and written[1]["a"] == 1 and written[2]["o"] == "ack"
    assert ledger.path.read_bytes().endswith(b"\n")


def test_a_second_ledger_on_the_same_path_appends_after_the_first(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path) as first, Ledger(path) as second:
        first.published(1)
        second.published(2)
        first.published(3)
        assert first.check().published == {1, 2, 3} == second.check().published
    assert [r["id"] for r in records(path)] == [1, 2, 3]


# ---- "Each record is one os.write of one whole line on an O_APPEND descriptor: lines from many
# processes never interleave."

WRITER = """
import sys
from trio_streams.testing.faults import Ledger
path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
pad = "x" * 3900
with Ledger(path) as ledger:
    print("ready", flush=True)
    sys.stdin.readline()  # all start writing at once
    for n in range(count):
        ledger.published(f"{name}-{n}-{pad}", lane=name)
"""
COUNT = 1500


def test_records_from_several_processes_writing_at_once_are_never_torn(tmp_path: Path) -> None:
    # Lines of nearly MAX_LINE bytes, so a write split in two would show in most of them.
    path = tmp_path / "ledger.jsonl"
    names = [f"p{i}" for i in range(4)]
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WRITER, str(path), name, str(COUNT)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        for name in names
    ]
    try:
        for proc in procs:
            assert proc.stdout is not None and proc.stdout.readline() == b"ready\n"
        for proc in procs:
            assert proc.stdin is not None
            proc.stdin.write(b"go\n")
            proc.stdin.close()
        assert [proc.wait(timeout=60) for proc in procs] == [0] * len(names)
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
            assert proc.stdout is not None
            proc.stdout.close()
    lines = path.read_bytes().split(b"\n")
    assert lines[-1] == b""
    seen: dict[str, list[int]] = {name: [] for name in names}
    writers = []
    for line in lines[:-1]:
        record = json.loads(line)  # a torn or mixed line would not parse
        name, n, pad = str(record["id"]).split("-")
        assert pad == "x" * 3900 and record["lane"] == name
        seen[name].append(int(n))
        writers.append(name)
    # Every record once, each process's in the order it wrote them.
    assert seen == {name: list(range(COUNT)) for name in names}
    # They did write at once: the file switches between writers more often than once each.
    switches = sum(a != b for a, b in pairwise(writers))
    print(f"switches between writers: {switches}")
    assert switches > len(names), switches
    with Ledger(path) as reader:
        report = reader.check()
    assert len(report.published) == len(names) * COUNT and report.order_breaks == []


# ---- "A line is at most MAX_LINE bytes: a longer record is refused, and nothing is written."


def test_a_record_over_the_line_limit_is_refused_and_nothing_is_written(ledger: Ledger) -> None:
    ledger.published("short")
    with pytest.raises(LedgerError, match=r"over the 4096-byte limit") as raised:
        ledger.published("x" * MAX_LINE)
    assert str(ledger.path) in str(raised.value)
    assert len(records(ledger.path)) == 1


def test_an_id_is_an_int_or_a_str(ledger: Ledger) -> None:
    for bad in (True, 1.5, b"1", None):
        with pytest.raises(TypeError, match="an int or a str"):
            ledger.published(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a run ends with one of"):
        ledger.run_ended(1, "done")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="settled as one of"):
        ledger.settled(1, "acked")  # type: ignore[arg-type]
    assert not ledger.path.read_bytes()


@pytest.mark.parametrize("bad", ["x", "2", 1.5, None, True, False])
def test_an_attempt_that_is_not_an_int_is_a_type_error_when_recorded(
    ledger: Ledger, bad: object
) -> None:
    with pytest.raises(TypeError, match=f"attempt is an int >= 1.*not {bad!r}"):
        ledger.run_began(1, bad)  # type: ignore[arg-type]
    if bad is not None:  # run_ended's attempt=None means the latest run
        with pytest.raises(TypeError, match="attempt"):
            ledger.run_ended(1, "ack", attempt=bad)  # type: ignore[arg-type]
    assert not ledger.path.read_bytes()
    ledger.check()  # the ledger stays readable


@pytest.mark.parametrize("bad", [0, -1])
def test_an_attempt_below_one_is_a_value_error_when_recorded(ledger: Ledger, bad: int) -> None:
    with pytest.raises(ValueError, match=f"attempt is an int >= 1.*not {bad}"):
        ledger.run_began(1, bad)
    with pytest.raises(ValueError, match="attempt"):
        ledger.run_ended(1, "ack", attempt=bad)
    assert not ledger.path.read_bytes()


@pytest.mark.parametrize(
    "line",
    [
        b'{"t":"run","id":1,"a":"x","pid":1}',
        b'{"t":"run","id":1,"a":null,"pid":1}',
        b'{"t":"run","id":1,"a":1.5,"pid":1}',
        b'{"t":"run","id":1,"a":0,"pid":1}',
        b'{"t":"run","id":1,"a":1,"pid":"me"}',
        b'{"t":"ended","id":1,"o":"ack","a":"2","pid":1}',
        b'{"t":"ended","id":1,"o":7,"pid":1}',
        b'{"t":"settled","id":1,"how":null,"pid":1}',
        b'{"t":"settled","id":1,"how":"bogus","pid":1}',
        b'{"t":"ended","id":1,"o":"bogus","a":1,"pid":1}',
        b'{"t":"published","id":true,"pid":1}',
        b'{"t":"published","id":[1],"pid":1}',
        b'{"t":"published","id":1,"lane":{},"pid":1}',
    ],
)
def test_a_line_another_writer_left_that_check_cannot_read_is_a_ledger_error_naming_it(
    ledger: Ledger, line: bytes
) -> None:
    ledger.published(1)
    with ledger.path.open("ab") as file:
        file.write(line + b"\n")
    ledger.published(2)
    for reader in (ledger, Ledger(ledger.path)):  # every process, and every later check
        for _ in range(2):
            with pytest.raises(LedgerError, match=rf"{ledger.path}, line 2: not a record"):
                reader.check()


def test_a_closed_ledger_refuses_records(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "l")
    ledger.close()
    ledger.close()  # twice is harmless
    with pytest.raises(LedgerError, match="is closed"):
        ledger.published(1)


# ---- "The checker reads what was appended since the last check, up to its last newline."


def test_a_line_still_being_written_is_read_once_it_is_whole(ledger: Ledger) -> None:
    ledger.published(1)
    with ledger.path.open("ab") as file:
        file.write(b'{"t":"published","id":2,"lane":nu')
    assert ledger.check().published == {1}
    with ledger.path.open("ab") as file:
        file.write(b'll,"pid":1}\n')
    assert ledger.check().published == {1, 2}
    ledger.published(3)
    assert ledger.check().published == {1, 2, 3}


def test_a_line_that_is_not_a_record_is_an_error_naming_the_file_and_line(ledger: Ledger) -> None:
    ledger.published(1)
    with ledger.path.open("ab") as file:
        file.write(b"garbage\n")
    with pytest.raises(LedgerError, match=rf"{ledger.path}, line 2: not a record"):
        ledger.check()


# ---- "lost: published, never handled and not dead-lettered, not pending."


def test_a_message_published_and_never_handled_is_lost(ledger: Ledger) -> None:
    for n in (1, 2, 3, 4, 5):
        ledger.published(n)
    handled_once(ledger, 1)
    ledger.run_began(2, 1)  # a run that never ended: not handled
    ledger.run_began(3, 1)
    ledger.run_ended(3, "retry")  # asked for another run, never had it
    ledger.settled(4, "dead-letter")
    report = ledger.check(pending=[5])
    assert report.lost == {2, 3}
    assert report.handled == {1} and report.dead_lettered == {4} and report.pending == {5}
    assert not report.ok


def test_dead_lettered_dropped_and_pending_messages_are_not_lost(ledger: Ledger) -> None:
    for n in (1, 2, 3, 4):
        ledger.published(n)
    handled_once(ledger, 1)
    ledger.run_began(2, 1)
    ledger.run_ended(2, "retry")
    ledger.settled(2, "dead-letter")
    ledger.run_began(3, 1)
    ledger.run_ended(3, "drop")
    ledger.settled(3, "drop")
    report = ledger.check(pending=[4])
    assert report.lost == set() and report.ok
    assert report.dead_lettered == {2} and report.dropped == {3} and report.pending == {4}


def test_what_the_server_dead_lettered_is_given_where_no_record_says_so(ledger: Ledger) -> None:
    ledger.published(1)
    ledger.run_began(1, 1)  # killed: the server dead-letters it on its next delivery
    assert ledger.check().lost == {1}
    report = ledger.check(dead_lettered=[1])
    assert report.lost == set() and report.dead_lettered == {1} and report.ok


# ---- "settled without a handler run": recorded, or inferred from what is no longer pending.


def test_a_message_settled_though_no_run_of_it_began_is_reported(ledger: Ledger) -> None:
    for n in (1, 2, 3):
        ledger.published(n)
    handled_once(ledger, 1)
    ledger.settled(2, "ack")  # acknowledged, never run
    ledger.settled(3, "dead-letter")  # charged attempts it never had
    report = ledger.check()
    assert report.settled_without_run == {2, 3}
    assert not report.ok


def test_a_run_ended_not_run_does_not_count(ledger: Ledger) -> None:
    # The delivery was spent (or undecodable): its handling began, the handler was not called.
    ledger.published(1)
    ledger.run_began(1, 4)
    ledger.run_ended(1, "not-run", attempt=4)
    ledger.settled(1, "dead-letter")
    report = ledger.check()
    assert report.runs[1] == 0 and report.attempts.get(1) is None
    assert report.settled_without_run == {1}


# ---- "Where a transport cannot report its settles, the checker takes pending= (what the server
# still holds at the end) and treats the rest as settled."


def test_given_pending_every_other_message_is_taken_as_settled(ledger: Ledger) -> None:
    for n in (1, 2, 3):
        ledger.published(n)
    ledger.run_began(1, 1)
    ledger.run_ended(1, "ack")  # no settle records at all: a handler-only ledger
    # Without pending=, nothing is known settled: 2 and 3 are lost but not settled.
    report = ledger.check()
    assert report.settled_without_run == set() and report.lost == {2, 3}
    # The server holds 3: so 2 was settled, by no run.
    report = ledger.check(pending=[3])
    assert report.settled_without_run == {2} and report.lost == {2}
    assert report.pending == {3}
    report = ledger.check(pending=[2, 3])
    assert report.ok and report.lost == set()


# ---- "duplicates: runs beyond the first" (beyond those its own runs asked for).


def test_runs_beyond_the_first_are_duplicates(ledger: Ledger) -> None:
    for n in (1, 2, 3, 4):
        ledger.published(n)
    handled_once(ledger, 1)
    handled_once(ledger, 1)  # run again after it was acknowledged
    ledger.run_began(2, 1)  # killed under way
    ledger.run_began(2, 2)  # killed again
    ledger.run_began(2, 3)
    ledger.run_ended(2, "ack", attempt=3)
    ledger.run_began(3, 1)
    ledger.run_ended(3, "cancelled")  # a hard stop: run again, as after a crash
    ledger.run_began(3, 1)
    ledger.run_ended(3, "ack")
    report = ledger.check()
    assert report.duplicates == {1: 1, 2: 2, 3: 1}
    assert report.duplicate_runs == 4
    assert report.runs[2] == 3 and report.attempts[2] == [1, 2, 3]
    # Duplicates are allowed by at-least-once delivery: counted, not a failure.
    assert report.lost == {4} and report.settled_without_run == set()


def test_a_run_that_asked_for_a_retry_makes_the_next_run_no_duplicate(ledger: Ledger) -> None:
    ledger.published(1)
    for attempt in (1, 2):
        ledger.run_began(1, attempt)
        ledger.run_ended(1, "retry")
    ledger.run_began(1, 3)
    ledger.run_ended(1, "ack")
    report = ledger.check()
    assert report.duplicates == {} and report.runs[1] == 3 and report.handled == {1}


def test_runs_of_one_message_in_two_processes_at_once_are_duplicates(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    with Ledger(path) as ledger:
        ledger.published(1)
        for pid in (100, 200):  # two consumers ran it at once (a claim while it ran)
            with path.open("ab") as file:
                file.write(f'{{"t":"run","id":1,"a":1,"pid":{pid}}}\n'.encode())
        for pid in (200, 100):
            with path.open("ab") as file:
                file.write(f'{{"t":"ended","id":1,"o":"ack","a":null,"pid":{pid}}}\n'.encode())
        report = ledger.check()
    assert report.duplicates == {1: 1} and report.handled == {1}


# ---- "order breaks within an ordered lane: within a lane, the first runs of messages begin in
# publish order."


def test_a_message_whose_first_run_began_before_an_earlier_ones_is_an_order_break(
    ledger: Ledger,
) -> None:
    for n in (1, 2, 3, 4):
        ledger.published(n, lane="a")
    handled_once(ledger, 1, 3, 2, 4)
    report = ledger.check()
    assert report.order_breaks == [OrderBreak("a", 3, 2)]  # 3 ran ahead of 2
    assert not report.ok


def test_only_first_runs_within_one_lane_are_held_to_publish_order(ledger: Ledger) -> None:
    ledger.published(1, lane="a")
    ledger.published(2, lane="b")
    ledger.published(3, lane="a")
    ledger.published(4)  # in no lane: order not checked
    ledger.published(5, lane="b")
    # 1 runs, is killed, 3 runs, then 1 again (a redelivery after its first run: in order).
    ledger.run_began(1, 1)
    handled_once(ledger, 4, 2)
    ledger.run_began(3, 1)
    ledger.run_ended(3, "ack")
    ledger.run_began(1, 2)
    ledger.run_ended(1, "ack", attempt=2)
    handled_once(ledger, 5)
    report = ledger.check()
    assert report.order_breaks == [] and report.ok
    # A message that never ran (lost) is not an order break: it is reported as lost.
    ledger.published(6, lane="b")
    ledger.published(7, lane="b")
    handled_once(ledger, 7)
    report = ledger.check()
    assert report.order_breaks == [] and report.lost == {6}


# ---- "effects applied twice (the test passes the effects it counted)."


def test_an_effect_applied_twice_is_reported_from_the_counts_the_test_gives(ledger: Ledger) -> None:
    for n in (1, 2, 3):
        ledger.published(n)
    handled_once(ledger, 1, 2, 3)
    handled_once(ledger, 2)  # run twice: allowed, if its effect was applied once
    report = ledger.check(effects={1: 1, 2: 1, 3: 2})
    assert report.effects_twice == {3: 2} and not report.ok
    assert report.duplicates == {2: 1}
    assert ledger.check(effects={1: 1, 2: 1, 3: 1}).ok


def test_effect_records_are_counted_when_no_counts_are_given(ledger: Ledger) -> None:
    ledger.published(1)
    handled_once(ledger, 1)
    ledger.effect(1)
    assert ledger.check().effects_twice == {}
    ledger.effect(1)
    assert ledger.check().effects_twice == {1: 2}
    assert ledger.check(effects={1: 1}).effects_twice == {}  # the given counts win


# ---- For the atomic window, a handled message whose effect was never applied is lost in
# substance: its handler returned ack, the transaction carrying its effect never happened.


def test_a_handled_message_whose_effect_was_never_applied_is_reported(ledger: Ledger) -> None:
    for n in (1, 2, 3, 4):
        ledger.published(n)
    handled_once(ledger, 1, 2, 3)
    ledger.run_began(4, 1)
    ledger.run_ended(4, "drop")  # the handler chose to apply nothing: no effect expected
    ledger.settled(4, "drop")
    report = ledger.check(effects={1: 1})
    assert report.effects_missing == {2, 3} and not report.ok
    assert "effects never applied            2: 2, 3" in report.block()
    assert ledger.check(effects={1: 1, 2: 1, 3: 1}).ok


def test_a_dead_lettered_or_pending_message_without_its_effect_is_not_missing_it(
    ledger: Ledger,
) -> None:
    for n in (1, 2, 3):
        ledger.published(n)
    handled_once(ledger, 1, 2, 3)  # ran, but the acknowledgements never reached the server
    report = ledger.check(effects={1: 1}, dead_lettered=[2], pending=[3])
    assert report.effects_missing == set() and report.ok
    # Without counted effects (none given, no effect records) nothing is checked.
    assert ledger.check().effects_missing == set()


# ---- "At-most-once transports count 'lost' separately, as dropped as the transport allows."


def test_at_most_once_what_would_be_lost_is_dropped_as_the_transport_allows(
    ledger: Ledger,
) -> None:
    for n in (1, 2, 3):
        ledger.published(n)
    handled_once(ledger, 1)
    report = ledger.check(at_most_once=True)
    assert report.lost == set() and report.dropped_as_allowed == {2, 3} and report.ok
    assert "dropped, as the transport allows" in report.block()
    assert ledger.check().lost == {2, 3}


# ---- Runs, settles or effects of messages no producer recorded are reported (garbled or invented).


def test_a_run_of_a_message_never_published_is_unknown(ledger: Ledger) -> None:
    ledger.published(1)
    handled_once(ledger, 1)
    handled_once(ledger, "1")  # the id as text: never published as such
    report = ledger.check()
    assert report.unknown == {"1"} and not report.ok


# ---- "The report is one printed block and a value a test asserts on."


def test_the_report_is_one_block_naming_each_finding_and_its_ids(ledger: Ledger) -> None:
    for n in range(1, 13):
        ledger.published(n, lane="a")
    handled_once(ledger, *range(1, 11))
    handled_once(ledger, 3)
    ledger.settled(11, "ack")
    report = ledger.check(effects={n: 2 if n == 5 else 1 for n in range(1, 11)})
    block = report.block()
    assert str(report) == block
    assert block.splitlines() == [
        f"ledger {ledger.path}: 12 published, 10 handled, 11 handler runs",
        "  lost                             2: 11, 12",
        "  settled without a run            1: 11",
        "  duplicates                       1 (runs beyond the first, of 1 message: 3 +1)",
        "  order breaks                     0",
        "  effects applied twice            1: 5 x2",
        "  dead-lettered 0, dropped 0, pending 0",
        "  FAILED: lost 2, settled without a run 1, effects applied twice 1",
    ]


def test_a_long_list_of_ids_is_cut_after_eight(ledger: Ledger) -> None:
    for n in range(1, 21):
        ledger.published(n)
    assert "lost                             20: 1, 2, 3, 4, 5, 6, 7, 8 and 12 more" in str(
        ledger.check()
    )


def test_a_clean_history_is_ok(ledger: Ledger) -> None:
    for n in (1, 2):
        ledger.published(n, lane="a")
    handled_once(ledger, 1, 2)
    report = ledger.check()
    assert isinstance(report, LedgerReport) and report.ok
    assert report.block().endswith("\n  OK")
    assert repr(report) == "<LedgerReport 2 published, ok=True: nothing wrong>"
    ledger.published(3)
    assert repr(ledger.check()) == "<LedgerReport 3 published, ok=False: lost 1>"


# ---- "ledger_middleware records every handler run and its outcome without touching handlers."


def by_payload(delivery: Delivery) -> int:
    return int(delivery.payload)


async def test_the_middleware_records_each_run_its_outcome_and_its_settle(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    app = App("svc", middlewares=[ledger_middleware(ledger, id_of=by_payload)])
    broker = app.broker(MemoryBroker())
    tries: dict[int, int] = {}

    @broker.subscriber(MemoryStream("jobs"), max_attempts=2, dead_letter="dlq")
    async def work(n: int, ctx: Context) -> Outcome | None:
        tries[n] = tries.get(n, 0) + 1
        if n == 2 and ctx.attempt == 1:
            return retry()
        if n == 3:
            raise RuntimeError("always fails")
        return None

    async with app.test() as t:
        for n in (1, 2, 3):
            ledger.published(n)
            await t.publish("jobs", n)
    report = ledger.check()
    assert tries == {1: 1, 2: 2, 3: 2}
    assert report.runs == {1: 1, 2: 2, 3: 2}
    assert report.attempts == {1: [1], 2: [1, 2], 3: [1, 2]}
    assert report.handled == {1, 2} and report.dead_lettered == {3}
    assert report.duplicates == {} and report.ok, report
    ends = [(r["id"], r["o"]) for r in records(ledger.path) if r["t"] == "ended"]
    assert ends == [(1, "ack"), (2, "retry"), (2, "ack"), (3, "retry"), (3, "retry")]
    settles = [(r["id"], r["how"]) for r in records(ledger.path) if r["t"] == "settled"]
    assert settles == [(1, "ack"), (2, "ack"), (3, "dead-letter")]


async def test_the_middleware_ends_a_delivery_whose_handler_was_not_called_not_run(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    app = App("svc", middlewares=[ledger_middleware(ledger, id_of=lambda d: d.payload.decode())])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("jobs"), dead_letter="dlq")
    async def work(n: int) -> None: ...

    async with app.test() as t:
        ledger.published("x")
        await t.publish("jobs", "x")  # not JSON, where an int is expected: undecodable
    report = ledger.check()
    assert report.runs == {} and report.dead_lettered == {"x"}
    # Settled without a run, on purpose: a test of undecodable messages expects exactly these.
    assert report.settled_without_run == {"x"}
    assert [r["o"] for r in records(ledger.path) if r["t"] == "ended"] == ["not-run"]


async def test_the_middleware_ends_a_run_cancelled_under_way_cancelled(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    app = App("svc", middlewares=[ledger_middleware(ledger, id_of=by_payload)])
    broker = app.broker(MemoryBroker())
    began = trio.Event()

    @broker.subscriber(MemoryStream("jobs"))
    async def work(n: int) -> None:
        began.set()
        await trio.sleep_forever()

    ledger.published(1)
    with trio.CancelScope() as scope:
        async with app.test() as t, trio.open_nursery() as nursery:
            nursery.start_soon(t.publish, "jobs", 1)
            await began.wait()
            scope.cancel()
    report = ledger.check()
    assert report.runs == {1: 1} and report.handled == set() and report.lost == {1}
    assert [r["o"] for r in records(ledger.path) if r["t"] == "ended"] == ["cancelled"]


async def test_an_id_of_that_fails_fails_the_subscription_naming_the_delivery(
    tmp_path: Path,
) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    app = App("svc", middlewares=[ledger_middleware(ledger, id_of=by_payload)])
    broker = app.broker(MemoryBroker())

    @broker.subscriber(MemoryStream("jobs"), name="work")
    async def work(n: str) -> None: ...

    with pytest.raises(BaseException) as raised:  # noqa: PT011 - the group's leaf is checked
        async with app.test() as t:
            await t.publish("jobs", "not a number")
    found = [exc for exc in _leaves(raised.value) if isinstance(exc, LedgerError)]
    assert found, raised.value
    assert "id_of failed on a delivery of 'work'" in str(found[0])


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    chained = [exc]
    cause = exc.__cause__ or exc.__context__
    while cause is not None:
        chained.append(cause)
        cause = cause.__cause__ or cause.__context__
    return chained


async def test_the_middleware_records_each_message_of_a_batch_as_a_run(tmp_path: Path) -> None:
    ledger = Ledger(tmp_path / "ledger.jsonl")
    app = App("svc", middlewares=[ledger_middleware(ledger, id_of=by_payload)])
    broker = app.broker(MemoryBroker())
    batches: list[list[int]] = []

    @broker.subscriber(MemoryStream("jobs"), batch=3, max_wait=0.01)
    async def work(ns: list[int]) -> None:
        batches.append(ns)

    async with app.test() as t:
        for n in (1, 2, 3):
            ledger.published(n)
            await broker.publish("jobs", n)
        await t.settled()
    report = ledger.check()
    assert sorted(n for batch in batches for n in batch) == [1, 2, 3]
    assert report.runs == {1: 1, 2: 1, 3: 1} and report.handled == {1, 2, 3} and report.ok
