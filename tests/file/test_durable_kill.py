"""Kill -9 a durable consumer process mid-stream, again and again: nothing is ever skipped.

A real subprocess (``tests/file/durable_consumer.py``) replays 3000 messages as a durable
consumer with four workers. The kit kills it with SIGKILL once it has handled 500 messages
(``KillPoint.after_deliveries``), four times, then lets a last run finish. Every message must
have been handled at least once; after each kill, everything up to the stored watermark must
have been handled; and a restarted run never handles anything at or before the watermark it
resumed from.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
import trio

from trio_streams.testing.faults import AppProcess, KillPoint

from .apps import write_numbers

ROOT = Path(__file__).parents[2]


def _stored(path: Path) -> int | None:
    state = path.parent / (path.name + ".consumers") / "billing.json"
    if not state.exists():
        return None
    sequence = json.loads(state.read_text())["sequence"]
    assert sequence is None or isinstance(sequence, int)
    return sequence


async def _run(path: Path, *, kill_after: int | None, deadline: float) -> tuple[list[int], int]:
    """One consumer process, killed once it has handled ``kill_after`` messages (or left to
    finish the replay); what it handled and its exit status."""
    kill_at = None if kill_after is None else KillPoint.after_deliveries(kill_after)
    consumer = AppProcess(
        "tests.file.durable_consumer", path, kill_at=kill_at, cwd=ROOT, timeout=deadline
    )
    async with consumer:
        status = await (consumer.wait() if kill_at is None else consumer.killed())
    return [int(line) for line in consumer.lines()], status


async def kill_again_and_again(
    path: Path, *, messages: int, kills: int, per_run: int, deadline: float
) -> None:
    write_numbers(path, messages, key="orders")
    handled: set[int] = set()
    total = 0
    resumed_from: list[int | None] = []
    with trio.fail_after(deadline):
        for run in range(kills + 1):
            start = _stored(path)
            resumed_from.append(start)
            kill_after = per_run if run < kills else None
            lines, status = await _run(path, kill_after=kill_after, deadline=deadline)
            handled.update(lines)
            total += len(lines)
            # A restarted run resumes after its watermark: nothing at or before it again.
            assert all(n > (start or 0) for n in lines), f"run {run} went back before {start}"
            if run < kills:
                assert status == -signal.SIGKILL
                assert len(lines) >= per_run  # killed once the per_run-th delivery ended
                watermark = _stored(path)
                assert watermark is not None
                # Everything up to the stored watermark was handled: nothing can be skipped.
                assert set(range(1, watermark + 1)) <= handled, f"run {run} stored {watermark}"
            else:
                assert status == 0
    assert handled == set(range(1, messages + 1))  # every message handled at least once
    assert _stored(path) == messages
    assert all(start is not None for start in resumed_from[1:])  # every restart resumed
    assert total < 2 * messages  # redelivery is bounded by how often the position is stored


@pytest.mark.slow
async def test_kill_9_of_a_durable_consumer_mid_stream_loses_nothing(tmp_path: Path) -> None:
    await kill_again_and_again(
        tmp_path / "orders.ss", messages=3_000, kills=4, per_run=500, deadline=120
    )


@pytest.mark.soak
async def test_soak_thirty_kills_over_fifty_thousand_messages(tmp_path: Path) -> None:
    await kill_again_and_again(
        tmp_path / "orders.ss", messages=50_000, kills=30, per_run=1_500, deadline=600
    )
