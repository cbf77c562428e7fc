"""An attempt is a handler run, never a read: real servers, real processes, a ledger.

Each test is a sentence of the contract (docs/guides/outcomes.md, "An attempt is a handler
run"); the ledger (``trio_streams.testing.faults.Ledger``, over a key in ``tests/redis/ledger.py``)
checks every published number against the handler runs the consumers wrote down as they began
and what the server holds at the end.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest
import trio

from tests.redis.client.redis_waits import eventually
from tests.redis.streams.procs import Consumer
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient
from trio_streams.testing.faults import LedgerReport

from .ledger import KeyLedger

APP = "tests.redis.ledger_app"


def consumer(
    server: RedisServer, kind: str, key: str, name: str, runlog: Path, behaviour: str = "ok",
    *, count: int = 10, workers: int = 1, lease: float = 1.0,
) -> Consumer:  # fmt: skip
    return Consumer(
        server.url, kind, key, name, runlog, behaviour, count, workers, module=APP,
        env={"TRIO_STREAMS_STATE_DIR": str(runlog.parent / "state"), "LEDGER_LEASE": str(lease)},
    )  # fmt: skip


#: A lease far longer than the waits below: what a consumer takes within them was handed back
#: at the stop, never taken because a lease ran out.
LONG_LEASE = 600.0


async def settled(redis: RedisClient, ledger: KeyLedger, *, within: float = 30) -> LedgerReport:
    """Wait until nothing is pending and every number is handled or dead-lettered."""

    async def done() -> bool:
        report = await ledger.report()
        return not report.pending and not report.lost

    await eventually(done, within=within, what="every entry settled")
    report = await ledger.report()
    print(report)
    return report


# ---- "A message that crashes its process is still stopped: it reaches max_attempts by its own
# runs and is dead-lettered (or dropped) on its next delivery without running again. Its
# neighbours are not charged."


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stream", "list"])
@pytest.mark.parametrize(
    ("behaviour", "workers"),
    [("poison:4", 1), ("slow-poison:4", 1), ("slow-poison:4", 4)],
    ids=["quick", "slow", "slow-4-workers"],
)
async def test_a_poison_that_exits_its_process_is_dead_lettered_after_exactly_max_attempts_runs(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path, kind: str, behaviour: str,
    workers: int,
) -> None:  # fmt: skip
    # One read of ten, the fourth the poison. "slow": each run takes 0.3 s, so the runs of the
    # three before it reach Redis before it dies, their acknowledgements still in the window.
    # With four workers, three others are under way when it dies (their runs count): they come
    # back to run alone, one at a time, and finish; the poison dies alone.
    ledger = KeyLedger(redis, kind, "jobs", tmp_path / "runs.log")
    await ledger.publish(range(1, 11))
    deaths = 0
    while True:
        proc = consumer(redis_server, kind, "jobs", "w1", ledger.path, behaviour, workers=workers)
        try:
            with trio.fail_after(30):
                while proc.process.poll() is None:
                    report = await ledger.report()
                    if not report.pending and not report.lost:
                        break
                    await trio.sleep(0.05)
        finally:
            exited = proc.process.poll()
            proc.stop()
        if exited is None:
            break
        deaths += 1
        assert deaths <= 3, "the poison ran more than max_attempts times"
    report = await settled(redis, ledger)
    assert report.runs[4] == 3 and report.attempts[4] == [1, 2, 3]
    assert deaths == 3
    assert report.dead_lettered == {4}
    # Every neighbour handled; none was ever charged a run it did not have.
    assert report.handled == set(range(1, 11)) - {4}
    assert not report.settled_without_run
    for n in set(range(1, 11)) - {4}:
        # A neighbour whose run finished is acknowledged by the next consumer on the host,
        # not run again; one only read is run once, as a first attempt; one under way beside
        # the poison (four workers) counts that run and finishes the next, alone.
        expected = [[1]] if workers == 1 else [[1], [1, 2]]
        assert report.attempts[n] in expected, (n, report.attempts[n])


# ---- "A graceful stop finishes what the handlers hold, and what was read but not started is
# ... handed back with its count as it was ... so the next consumer handles it at once."


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stream", "list"])
async def test_ten_graceful_stops_in_a_row_during_a_backlog_charge_no_attempt(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path, kind: str
) -> None:
    ledger = KeyLedger(redis, kind, "jobs", tmp_path / "runs.log")
    await ledger.publish(range(1, 3001))
    waits: list[float] = []
    for stop in range(10):
        proc = consumer(
            redis_server, kind, "jobs", "w1", ledger.path, "slow", count=50, lease=LONG_LEASE
        )
        if stop:  # what the last stop handed back is handled by this consumer at once
            started = time.monotonic()
            await proc.wait_line("handled ", within=30)
            waits.append(time.monotonic() - started)
        target = ledger.handled() + 100

        async def progressed(target: int = target) -> bool:
            await trio.lowlevel.checkpoint()
            return ledger.handled() >= target

        await eventually(progressed, within=30, what="a hundred more handled")
        proc.signal(signal.SIGTERM)
        assert await proc.wait_exit() == 0
        proc.stop()
    last = consumer(redis_server, kind, "jobs", "w1", ledger.path, "ok", count=100)
    try:
        report = await settled(redis, ledger, within=60)
    finally:
        last.stop()
    assert report.handled == set(range(1, 3001))
    assert not report.dead_lettered and not report.settled_without_run
    # Nobody died: every run was a first attempt (a stop charged nothing, nothing ran twice).
    assert {attempt for seen in report.attempts.values() for attempt in seen} == {1}
    assert report.duplicates == {}
    # Within 30 s of a start, under a 600 s lease: handed back, not waited out. The times
    # (a process start included) are printed, not asserted: they vary with the machine's load.
    print(f"first handled after a restart within (s): {[round(w, 2) for w in waits]}")


@pytest.mark.slow
async def test_what_a_graceful_stop_hands_back_another_live_consumer_takes_at_once(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path
) -> None:
    ledger = KeyLedger(redis, "stream", "jobs", tmp_path / "runs.log")
    await ledger.publish(range(1, 2001))
    stays = consumer(
        redis_server, "stream", "jobs", "b", ledger.path, "slow", count=50, lease=LONG_LEASE
    )
    goes = consumer(
        redis_server, "stream", "jobs", "a", ledger.path, "slow", count=50, lease=LONG_LEASE
    )
    try:
        await goes.wait_line("handled ", within=10)
        await stays.wait_line("handled ", within=10)
        goes.signal(signal.SIGTERM)
        assert await goes.wait_exit() == 0
        reply = await redis.execute("XPENDING", "jobs", "g", "-", "+", 1000, "a")
        handed_back = {entry[0] for entry in reply}
        started = time.monotonic()

        async def taken() -> bool:
            reply = await redis.execute("XPENDING", "jobs", "g", "-", "+", 1000, "a")
            return not reply

        # Within 30 s under a 600 s min_idle: only a hand-back makes them claimable so soon.
        await eventually(taken, within=30, what="consumer a's entries taken by b")
        took = time.monotonic() - started
        report = await settled(redis, ledger, within=60)
    finally:
        stays.stop()
        goes.stop()
    print(f"{len(handed_back)} entries handed back, taken by the other consumer in {took:.2f} s")
    assert handed_back  # the stop had something to hand back
    assert report.handled == set(range(1, 2001)) and not report.settled_without_run
    assert {attempt for seen in report.attempts.values() for attempt in seen} == {1}


# ---- "A crash counts against everything read with it" was the defect: kill -9 of consumers
# of a backlog charges only the runs under way.


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["stream", "list"])
async def test_repeated_kill_9_of_two_consumers_settle_nothing_without_a_run(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path, kind: str
) -> None:
    await kill_campaign(redis_server, redis, tmp_path, kind, entries=3000, kills=6)


async def kill_campaign(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path, kind: str, *,
    entries: int, kills: int,
) -> LedgerReport:  # fmt: skip
    """Two consumers of a backlog of ``entries``, one of them killed (-9) and restarted under
    its name after each ``entries / (kills + 1)`` runs; the ledger at the end."""
    ledger = KeyLedger(redis, kind, "jobs", tmp_path / "runs.log")
    await ledger.publish(range(1, entries + 1))
    step = entries // (kills + 1)
    names = ["c1", "c2"]
    running = {
        name: consumer(redis_server, kind, "jobs", name, ledger.path, "slow", count=50, workers=4)
        for name in names
    }
    try:
        for kill in range(kills):
            target = ledger.handled() + step

            async def progressed(target: int = target) -> bool:
                await trio.lowlevel.checkpoint()
                return ledger.handled() >= min(target, entries)

            await eventually(progressed, within=60, what=f"{step} more entries run")
            name = names[kill % 2]
            running[name].kill()
            running[name] = consumer(
                redis_server, kind, "jobs", name, ledger.path, "slow", count=50, workers=4
            )
        report = await settled(redis, ledger, within=120)
    finally:
        for proc in running.values():
            proc.stop()
    assert report.handled == report.published
    assert not report.settled_without_run and not report.lost
    assert not report.dead_lettered  # no entry reached max_attempts=3 by being read
    # A run begins when it is recorded, just before the handler's first line: a kill in
    # between counts that run though the handler wrote nothing yet, so an entry's first
    # logged attempt may be 2 — at most once per kill and worker.
    late = {n: seen for n, seen in report.attempts.items() if seen[0] != 1}
    for n, seen in report.attempts.items():
        assert seen == sorted(set(seen)), (n, seen)
    assert all(seen[0] == 2 for seen in late.values()), late
    assert len(late) <= kills * 4, late
    print(f"entries whose first logged run was their second attempt: {len(late)}")
    return report


@pytest.mark.soak
@pytest.mark.parametrize("kind", ["stream", "list"])
async def test_30_kill_9_over_50k_entries_with_two_consumers_settle_nothing_without_a_run(
    redis_server: RedisServer, redis: RedisClient, tmp_path: Path, kind: str
) -> None:
    report = await kill_campaign(redis_server, redis, tmp_path, kind, entries=50_000, kills=30)
    print(f"soak ({kind}):\n{report}")
