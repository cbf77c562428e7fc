"""Many writer processes, one stream file, a live follower in another: the contract end to end.

Four writer processes append to several shared keys in random batches while a fifth process
follows the file live. Every message must reach the follower exactly once and in its writer's
order; each key's sequence numbers must be dense and increasing; and the finished file, decoded
and encoded again by the project's own encoder as one writer, must be byte for byte the same.
Then writers are killed with SIGKILL mid-burst, again and again (and every third dies half-way
through a write, under the lock: ``KillPoint.during_append``): the others continue the file, and
every reader reads it.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
from collections import defaultdict
from contextlib import AsyncExitStack
from functools import partial
from pathlib import Path

import pytest

from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter
from trio_streams.testing.faults import AppProcess, KillPoint

from .many_writers import reencoded

ROOT = Path(__file__).parents[2]
TIMEOUT = 600


def _start(*args: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.file.many_writers", *args],
        stdout=subprocess.PIPE,
        cwd=ROOT,
    )


def _follower(path: Path) -> subprocess.Popen[bytes]:
    follower = _start("follow", str(path))
    assert follower.stdout is not None
    assert follower.stdout.readline() == b"ready\n"
    return follower


def _end(path: Path, follower: subprocess.Popen[bytes]) -> list[tuple[str, int, str]]:
    """Publish the follower's stop message; what it printed, the stop message left out."""
    with StreamWriter(path) as writer:
        writer.publish("end", b"end")
    out, _ = follower.communicate(timeout=TIMEOUT)
    assert follower.returncode == 0
    lines = [line.split(b" ", 2) for line in out.splitlines()]
    assert lines[-1][0] == b"end"
    return [(k.decode(), int(s), p.rstrip(b"\0").decode()) for k, s, p in lines[:-1]]


def _file(path: Path) -> list[tuple[str, int, str]]:
    with FileReader(path) as reader:
        messages = [(m.stream_key, m.seq, m.payload.rstrip(b"\0").decode()) for m in reader]
        reader.check_finished()
    return [m for m in messages if m[0] != "end"]


def _check_sequences(messages: list[tuple[str, int, str]]) -> None:
    by_key: dict[str, list[int]] = defaultdict(list)
    for key, seq, _ in messages:
        by_key[key].append(seq)
    for key, seqs in by_key.items():
        assert seqs == list(range(1, len(seqs) + 1)), f"{key}: not dense and increasing"


def _by_writer(messages: list[tuple[str, int, str]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = defaultdict(list)
    for _, _, payload in messages:
        writer, n = payload.split(":")[:2]
        out[writer].append(int(n))
    return out


def _four_writers_and_a_follower(tmp_path: Path, count: int) -> None:
    path = tmp_path / "many.ss"
    StreamWriter(path, beacon_interval=4096).close()
    follower = _follower(path)
    writers = [_start("write", str(path), f"w{i}", str(count), "3") for i in range(4)]
    for writer in writers:
        writer.communicate(timeout=TIMEOUT)
        assert writer.returncode == 0
    delivered = _end(path, follower)
    assert delivered == _file(path)
    assert len(delivered) == 4 * count
    assert _by_writer(delivered) == {f"w{i}": list(range(count)) for i in range(4)}
    _check_sequences(delivered)
    assert path.read_bytes() == reencoded(path)


@pytest.mark.slow
def test_four_writer_processes_and_a_live_follower(tmp_path: Path) -> None:
    _four_writers_and_a_follower(tmp_path, 3000)


@pytest.mark.soak
def test_four_writer_processes_of_50k_messages_and_a_live_follower(tmp_path: Path) -> None:
    _four_writers_and_a_follower(tmp_path, 50_000)


def _acked(lines: list[str]) -> int:
    acks = [int(line.split()[1]) for line in lines if line.startswith("ack ")]
    return acks[-1] if acks else -1


def _flushes(lines: list[str]) -> int:
    return sum(line.startswith("ack ") for line in lines)


def _flushed(process: AppProcess, flushes: int) -> bool:
    return _flushes(process.lines()) >= flushes


def _writer(*args: str, kill_at: KillPoint | None = None) -> AppProcess:
    return AppProcess("tests.file.many_writers", *args, kill_at=kill_at, cwd=ROOT, timeout=TIMEOUT)


async def _kills(tmp_path: Path, count: int, kills: int) -> None:
    path = tmp_path / "kills.ss"
    StreamWriter(path, beacon_interval=1024).close()
    rng = random.Random(kills)
    async with AsyncExitStack() as stack:
        follower = await stack.enter_async_context(_writer("follow", str(path)))
        await follower.wait_for_output("ready")
        steady = [
            await stack.enter_async_context(
                _writer("write", str(path), f"s{i}", str(count), "3", "--batch", "200")
            )
            for i in range(3)
        ]
        acked: dict[str, int] = {}
        for incarnation in range(kills):
            name = f"c{incarnation}"
            if incarnation % 3 == 2:  # dies half-way through a write, under the lock
                point = KillPoint.during_append(rng.randint(1, 20))
                async with _writer("write", str(path), name, str(count), "2", kill_at=point) as w:
                    await w.killed()
            else:
                acks = rng.randint(1, 20)
                async with _writer(
                    "write", str(path), name, "100000000", "2", "--batch", "500"
                ) as w:
                    await w.wait_until(partial(_flushed, w, acks), what=f"{acks} flushes")
                    w.kill()  # mid-burst, wherever it is
                    await w.wait()
            assert w.returncode == -signal.SIGKILL
            acked[name] = _acked(w.lines())
        for process in steady:
            assert await process.wait() == 0
        with StreamWriter(path) as writer:  # the follower's stop message
            writer.publish("end", b"end")
        assert await follower.wait() == 0
        ready, *printed = follower.lines()
        assert ready == "ready"
        lines = [line.split(" ", 2) for line in printed]
    assert lines[-1][0] == "end"
    delivered = [(k, int(s), p.rstrip("\0")) for k, s, p in lines[:-1]]
    in_file = _file(path)
    assert delivered == in_file
    written = _by_writer(in_file)
    for i in range(3):
        assert written[f"s{i}"] == list(range(count))
    for name, last in acked.items():
        # What a killed writer got into the file is a prefix of what it wrote, its acked
        # messages included.
        got = written.get(name, [])
        assert got == list(range(len(got))), name
        assert len(got) > last, name
    _check_sequences(in_file)
    assert path.read_bytes() == reencoded(path)


@pytest.mark.slow
async def test_writers_killed_mid_burst_leave_a_file_the_others_continue(tmp_path: Path) -> None:
    await _kills(tmp_path, 3000, 6)


@pytest.mark.soak
async def test_writers_killed_mid_burst_again_and_again_at_50k(tmp_path: Path) -> None:
    await _kills(tmp_path, 50_000, 30)
