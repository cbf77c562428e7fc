"""Kill -9 a durable consumer process mid-stream, again and again: nothing is ever skipped.

A real subprocess (``tests/file/durable_consumer.py``) replays 3000 messages as a durable
consumer with four workers. The test kills it with SIGKILL each time it has handled another
500 messages nobody handled before, four times, then lets a last run finish. Every message must
have been handled at least once; after each kill, everything up to the stored watermark must
have been handled; and a restarted run never handles anything at or before the watermark it
resumed from.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from .apps import write_numbers

ROOT = Path(__file__).parents[2]


def _stored(path: Path) -> int | None:
    state = path.parent / (path.name + ".consumers") / "billing.json"
    if not state.exists():
        return None
    sequence = json.loads(state.read_text())["sequence"]
    assert sequence is None or isinstance(sequence, int)
    return sequence


async def _run(
    path: Path, handled: set[int], *, kill: bool, new_per_run: int
) -> tuple[list[int], int]:
    """One consumer process; returns what it handled and its exit status."""
    process = await trio.lowlevel.open_process(
        [sys.executable, "-m", "tests.file.durable_consumer", str(path)],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )
    assert process.stdout is not None
    lines: list[int] = []
    new = 0
    pending = b""
    killed = False
    try:
        while chunk := await process.stdout.receive_some(65536):
            *complete, pending = (pending + chunk).split(b"\n")
            for line in complete:
                n = int(line)
                lines.append(n)
                if n not in handled:
                    handled.add(n)
                    new += 1
            if kill and new >= new_per_run and not killed:
                process.kill()
                killed = True
        assert pending == b""
    except BaseException:
        process.kill()  # the test failed halfway: leave no process behind
        raise
    finally:
        with trio.CancelScope(shield=True):
            status = await process.wait()
            await process.stdout.aclose()
    return lines, status


async def kill_again_and_again(
    path: Path, *, messages: int, kills: int, new_per_run: int, deadline: float
) -> None:
    write_numbers(path, messages, key="orders")
    handled: set[int] = set()
    total = 0
    resumed_from: list[int | None] = []
    with trio.fail_after(deadline):
        for run in range(kills + 1):
            start = _stored(path)
            resumed_from.append(start)
            lines, status = await _run(path, handled, kill=run < kills, new_per_run=new_per_run)
            total += len(lines)
            # A restarted run resumes after its watermark: nothing at or before it again.
            assert all(n > (start or 0) for n in lines), f"run {run} went back before {start}"
            if run < kills:
                assert status == -signal.SIGKILL
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


async def test_kill_9_of_a_durable_consumer_mid_stream_loses_nothing(tmp_path: Path) -> None:
    await kill_again_and_again(
        tmp_path / "orders.ss", messages=3_000, kills=4, new_per_run=500, deadline=120
    )


@pytest.mark.soak
async def test_soak_thirty_kills_over_fifty_thousand_messages(tmp_path: Path) -> None:
    await kill_again_and_again(
        tmp_path / "orders.ss", messages=50_000, kills=30, new_per_run=1_500, deadline=600
    )
