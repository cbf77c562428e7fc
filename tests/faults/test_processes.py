"""Process faults: an app in a subprocess, killed at a chosen point, against the real thing.

One test per sentence of the contract (``trio_streams/testing/faults/processes.py``), then each
kill point against real stream files and a real ``redis-server``: what the kill leaves, and that
the next process recovers it — nothing lost, nothing garbled, an attempt counted once per run.
"""

from __future__ import annotations

import fcntl
import math
import signal
from collections import defaultdict
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from tests.file.apps import write_numbers
from tests.redis_servers import RedisServer
from tests.redis_servers import redis_server as start_redis_server
from trio_streams.file import TruncatedError
from trio_streams.file.format import HEADER_SIZE
from trio_streams.file.reader import FileReader
from trio_streams.file.writer import StreamWriter
from trio_streams.redis.client import RedisClient, connect
from trio_streams.redis.frames import encode_frame
from trio_streams.redis.lists import processing_key
from trio_streams.testing.faults import (
    AppProcess,
    KillPoint,
    KillPointMissed,
    KillPointNotReached,
    UnexpectedExit,
)
from trio_streams.testing.faults._child import INTERNALS, InternalMissing, check_internals
from trio_streams.testing.faults.processes import DEFAULT_TIMEOUT

ROOT = Path(__file__).parents[2]
APPS = "tests.faults.proc_apps"
#: Every wait of a test: generous for a loaded 2-core machine, never reached when all is well.
WAIT = 30.0


def app(name: str, *args: str, **options: object) -> AppProcess:
    """``trio-streams run tests.faults.proc_apps:NAME --factory`` as an AppProcess."""
    return AppProcess(f"{APPS}:{name}", "--factory", *args, cwd=ROOT, **options)  # type: ignore[arg-type]


def read(path: Path) -> tuple[list[bytes], TruncatedError | None]:
    """The payloads of ``path``, and the error that ended the reading, if one did."""
    payloads: list[bytes] = []
    with FileReader(path) as reader:
        try:
            for message in reader:
                payloads.append(message.payload)
            reader.check_finished()
        except TruncatedError as cut:
            return payloads, cut
    return payloads, None


def _locked(path: Path) -> bool:
    """Whether a writer holds the file's lock (a shared lock cannot be had at once)."""
    with path.open("rb") as file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)
        return False


def handled(lines: list[str]) -> list[int]:
    return [int(line.split()[1]) for line in lines if line.startswith("handled ")]


@pytest.fixture
def orders(tmp_path: Path) -> Path:
    path = tmp_path / "orders.ss"
    write_numbers(path, 200, key="orders")
    return path


@pytest.fixture
def redis_server() -> Iterator[RedisServer]:
    with start_redis_server() as server:
        yield server


@pytest.fixture
async def redis(redis_server: RedisServer) -> AsyncIterator[RedisClient]:
    async with connect(redis_server.url) as client:
        yield client


# ---- the contract ------------------------------------------------------------------------------


async def test_after_deliveries_kills_once_the_nth_delivery_has_been_handled(
    orders: Path,
) -> None:
    async with app("file_consumer", kill_at=KillPoint.after_deliveries(7), env={
        "PROCS_FILE": str(orders)
    }) as p:  # fmt: skip
        status = await p.killed()
    assert status == -signal.SIGKILL
    assert p.returncode == -signal.SIGKILL
    assert handled(p.lines()) == list(range(1, 8))  # one worker: exactly seven, in order


async def test_inside_handler_kills_the_nth_run_while_it_is_under_way(orders: Path) -> None:
    # The handler passes a checkpoint, then prints: the third run is killed before it printed.
    async with app("file_consumer", kill_at=KillPoint.inside_handler(3), env={
        "PROCS_FILE": str(orders)
    }) as p:  # fmt: skip
        assert await p.killed() == -signal.SIGKILL
    assert handled(p.lines()) == [1, 2]


async def test_the_parent_learns_the_point_was_reached_before_the_process_dies(
    orders: Path,
) -> None:
    async with app("file_consumer", kill_at=KillPoint.after_deliveries(3), hold=True, env={
        "PROCS_FILE": str(orders)
    }) as p:  # fmt: skip
        await p.reached()
        assert p.reached_point
        assert p.returncode is None  # held at the point: it stands still, alive
        assert handled(p.lines()) == [1, 2, 3]
        assert await p.killed() == -signal.SIGKILL
    assert handled(p.lines()) == [1, 2, 3]  # nothing ran while it was held


async def test_a_point_never_reached_is_a_timeout_error_naming_the_point(orders: Path) -> None:
    env = {"PROCS_FILE": str(orders)}
    # 200 messages, then the replay ends and waits for the stop: the 500th delivery never comes.
    async with app("file_consumer", kill_at=KillPoint.after_deliveries(500), env=env) as p:
        await p.wait_for_output("handled 200")
        p.timeout = 0.5
        with pytest.raises(KillPointNotReached, match=r"after_deliveries\(500\) not reached") as e:
            await p.reached()
        assert isinstance(e.value, TimeoutError)
        assert "still running" in str(e.value)
        p.timeout = DEFAULT_TIMEOUT  # the short bound was the point's: a graceful stop takes longer
        assert await p.stop() == 0


async def test_a_process_that_ends_before_its_point_is_a_missed_point_with_its_status(
    tmp_path: Path,
) -> None:
    env = {"PROCS_FILE": str(tmp_path / "missing.ss")}  # existing_only: the app cannot start
    async with app("file_consumer", kill_at=KillPoint.inside_handler(1), env=env) as p:
        with pytest.raises(KillPointMissed, match=r"status 1 before reaching kill point") as e:
            await p.killed()
    assert "inside_handler(1)" in str(e.value)
    assert "missing.ss" in str(e.value)  # the end of its stderr says why
    assert p.returncode == 1


async def test_sigterm_at_the_point_is_the_apps_graceful_stop(orders: Path) -> None:
    async with app("file_consumer", kill_at=KillPoint.inside_handler(5), signal=signal.SIGTERM,
                   env={"PROCS_FILE": str(orders)}) as p:  # fmt: skip
        status = await p.killed()
    assert status == 0  # drained: the fifth run finished, then the app stopped
    assert handled(p.lines())[:5] == [1, 2, 3, 4, 5]
    assert b"stopped" in p.stderr


async def test_output_is_captured_and_stop_is_a_graceful_sigterm(orders: Path) -> None:
    async with app("file_consumer", env={"PROCS_FILE": str(orders)}) as p:
        await p.started()
        await p.wait_for_output("handled 200")
        assert await p.stop() == 0
    assert handled(p.lines()) == list(range(1, 201))
    assert b"running, 1 subscription" in p.stderr


async def test_leaving_the_block_kills_a_process_still_running(orders: Path) -> None:
    async with app("file_consumer", env={"PROCS_FILE": str(orders)}) as p:
        await p.started()
    assert p.returncode == -signal.SIGKILL


async def test_a_script_runs_as_itself_and_wait_returns_its_status(tmp_path: Path) -> None:
    script = tmp_path / "graceful.py"
    script.write_text(
        "import signal, sys\n"
        "signal.signal(signal.SIGTERM, lambda *a: sys.exit(4))\n"
        "print('ready', sys.argv[1:], flush=True)\n"
        "signal.pause()\n"
    )
    async with AppProcess(str(script), "x", 2) as p:
        assert await p.wait_for_output("ready") == "ready ['x', '2']"
        p.timeout = 0.2
        with pytest.raises(UnexpectedExit, match="did not report started"):
            await p.started()  # not an app: it never reports started
        p.timeout = WAIT
        assert await p.stop() == 4


async def test_wait_until_fails_naming_what_it_waited_for(orders: Path) -> None:
    async with app("file_consumer", env={"PROCS_FILE": str(orders)}) as p:
        await p.wait_until(lambda: len(handled(p.lines())) == 200, what="all")
        p.timeout = 0.2
        with pytest.raises(UnexpectedExit, match=r"no sign of a miracle within 0\.2 s"):
            await p.wait_until(lambda: False, what="a miracle")
        p.timeout = WAIT
        p.kill()
        with pytest.raises(UnexpectedExit, match="killed by SIGKILL before a miracle"):
            await p.wait_until(lambda: False, what="a miracle")


async def test_during_append_in_a_script_of_its_own(tmp_path: Path) -> None:
    path = tmp_path / "w.ss"
    script = tmp_path / "writer.py"
    script.write_text(
        "import sys\nfrom trio_streams.file.writer import StreamWriter\n"
        "with StreamWriter(sys.argv[1]) as w:\n"
        "    for i in range(10):\n"
        "        w.publish('k', b'm%d' % i)\n"
        "        print('ack', i, flush=True)\n"
    )
    StreamWriter(path).close()  # the header is written: the writes counted are appends
    async with AppProcess(str(script), path, kill_at=KillPoint.during_append(4)) as p:
        assert await p.killed() == -signal.SIGKILL
    acked = [line for line in p.lines() if line.startswith("ack ")]
    assert len(acked) == 3  # the fourth write was cut
    payloads, cut = read(path)
    assert payloads == [b"m0", b"m1", b"m2"]
    assert cut is not None


def test_bad_arguments_are_refused_at_once() -> None:
    with pytest.raises(ValueError, match="n must be a whole number"):
        KillPoint.after_deliveries(0)
    with pytest.raises(ValueError, match="hold=True"):
        AppProcess("m:app", hold=True)
    with pytest.raises(ValueError, match="--workers"):
        AppProcess("m:app", "--workers", "2", kill_at=KillPoint.inside_handler(1))
    assert str(KillPoint.between_settle_and_flush()) == "between_settle_and_flush(1)"


async def test_during_append_counts_only_writes_of_frames_never_a_new_files_header(
    tmp_path: Path,
) -> None:
    path = tmp_path / "new.ss"  # no file yet: the writer writes its header first
    script = tmp_path / "writer.py"
    script.write_text(
        "import sys\nfrom trio_streams.file.writer import StreamWriter\n"
        "with StreamWriter(sys.argv[1]) as w:\n"
        "    for i in range(10):\n"
        "        w.publish('k', b'm%d' % i)\n"
        "        print('ack', i, flush=True)\n"
    )
    async with AppProcess(script, path, kill_at=KillPoint.during_append(1)) as p:
        assert await p.killed() == -signal.SIGKILL
    assert not [line for line in p.lines() if line.startswith("ack ")]  # the 1st publish cut
    payloads, cut = read(path)
    assert payloads == []
    assert cut is not None  # a whole header, then part of the first frame
    assert path.stat().st_size > HEADER_SIZE


@pytest.mark.parametrize(
    "option", [["--workers=2"], ["--workers", "2"], ["--work=2"], ["--reload"], ["--rel"]]
)
def test_every_spelling_of_workers_or_reload_is_refused_with_a_kill_point(
    option: list[str],
) -> None:
    with pytest.raises(ValueError, match="--workers and --reload"):
        AppProcess("m:app", *option, kill_at=KillPoint.after_deliveries(3))
    AppProcess("m:app", *option)  # without a kill point, nothing to arm: allowed


def test_a_kill_point_is_a_kill_point_not_its_name() -> None:
    with pytest.raises(TypeError, match=r"kill_at is a KillPoint.*'inside_handler'"):
        AppProcess("m:app", kill_at="inside_handler")  # type: ignore[arg-type]


def test_a_path_is_taken_as_a_target_and_a_bad_target_is_refused_naming_it() -> None:
    assert AppProcess(Path("x.py")).describe() == "python x.py"
    assert AppProcess(Path("pkg/mod")).describe() == "python -m pkg/mod"
    for bad in ("", "  ", ":app", "m:", "-m", "--workers"):
        with pytest.raises(ValueError, match=f"target is .*not {bad!r}"):
            AppProcess(bad)
    with pytest.raises(TypeError, match=r"target is .*not 3"):
        AppProcess(3)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1, 0])
def test_a_timeout_that_is_not_finite_and_positive_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match=f"timeout must be finite and > 0 seconds, not {bad}"):
        AppProcess("m:app", timeout=bad)


def test_a_timeout_that_is_not_a_number_is_a_type_error() -> None:
    with pytest.raises(TypeError, match="timeout is a number of seconds, not '5'"):
        AppProcess("m:app", timeout="5")  # type: ignore[arg-type]


def test_every_internal_the_kill_points_wrap_still_exists() -> None:
    check_internals()  # fails naming the one renamed
    assert {path for _, path, _ in INTERNALS} >= {
        "Window.consumed",
        "StreamWriter._write_at",
        "Handler.fn",
        "App.serve_with",
    }


def test_a_renamed_internal_is_named_by_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    from trio_streams.redis.window import Window

    monkeypatch.delattr(Window, "consumed")
    with pytest.raises(InternalMissing, match=r"trio_streams\.redis\.window\.Window\.consumed"):
        check_internals()


# ---- stream files ------------------------------------------------------------------------------


async def test_during_append_leaves_a_cut_tail_the_next_writer_repairs(tmp_path: Path) -> None:
    path = tmp_path / "out.ss"
    StreamWriter(path).close()
    env = {"PROCS_FILE": str(path), "PROCS_COUNT": "20"}
    async with app("file_publisher", kill_at=KillPoint.during_append(6), hold=True, env=env) as p:
        await p.reached()
        # Held at the point: the writer holds the file's lock with part of a frame written.
        assert _locked(path)
        payloads, cut = read(path)
        assert cut is None  # an append under way: not an error yet
        assert await p.killed() == -signal.SIGKILL
    acked = [f"p:{line.split()[1]}".encode() for line in p.lines() if line.startswith("ack ")]
    assert len(acked) == 5  # the sixth write was the one cut
    assert payloads == acked  # read while held: every complete message
    payloads, cut = read(path)
    assert payloads == acked  # every complete message, none garbled
    assert cut is not None and not _locked(path)  # the lock is free: a provably cut tail
    with StreamWriter(path) as writer:  # the next writer repairs it and goes on
        writer.publish("k0", b"after")
    assert read(path) == ([*acked, b"after"], None)


async def test_a_durable_consumer_killed_after_n_deliveries_resumes_without_loss(
    orders: Path,
) -> None:
    env = {"PROCS_FILE": str(orders), "PROCS_WORKERS": "4"}
    seen: list[int] = []
    for _ in range(3):
        async with app("file_consumer", kill_at=KillPoint.after_deliveries(50), env=env) as p:
            assert await p.killed() == -signal.SIGKILL
        assert len(handled(p.lines())) >= 50
        seen += handled(p.lines())
    async with app("file_consumer", env=env) as p:
        await p.wait_for_output("handled 200")
        assert await p.stop() == 0
    seen += handled(p.lines())
    assert set(seen) == set(range(1, 201))  # nothing lost
    assert len(seen) < 2 * 200  # a resumed run starts near where the last one stopped


# ---- Redis -------------------------------------------------------------------------------------


def _runs(lines: list[str]) -> dict[int, list[int]]:
    """Per message, the attempts its runs were given, in order."""
    runs: dict[int, list[int]] = defaultdict(list)
    for line in lines:
        if line.startswith("begin "):
            _, n, attempt = line.split()
            runs[int(n)].append(int(attempt))
    return runs


def _ended(lines: list[str]) -> set[int]:
    return {int(line.split()[1]) for line in lines if line.startswith("end ")}


async def _load(redis: RedisClient, kind: str, count: int) -> None:
    pipeline = redis.pipeline()
    for n in range(1, count + 1):
        if kind == "group_consumer":
            pipeline.add("XADD", "jobs", "*", "_payload", str(n))
        else:
            pipeline.add("RPUSH", "jobs", encode_frame(str(n).encode(), {}))
    await pipeline.execute(raise_on_error=True)


async def _outstanding(redis: RedisClient, kind: str) -> int:
    if kind == "group_consumer":
        summary = await redis.execute("XPENDING", "jobs", "g")
        return int(summary[0])
    return int(await redis.execute("LLEN", processing_key("jobs", "c1")))


async def _finish(
    redis_server: RedisServer,
    kind: str,
    count: int,
    before: list[str],
    env: dict[str, str] | None = None,
) -> AppProcess:
    """A second process, without a kill point, until every message has ended in one of the
    two (``before``: the first's lines)."""
    env = {"PROCS_URL": redis_server.url, "PROCS_KEY": "jobs", **(env or {})}
    every = set(range(1, count + 1))
    async with app(kind, env=env) as p:
        await p.wait_until(lambda: _ended(before + p.lines()) >= every, what="every message")
        assert await p.stop() == 0
    return p


@pytest.mark.parametrize("kind", ["group_consumer", "list_consumer"])
async def test_killed_inside_a_handler_the_message_is_redelivered_its_attempt_counted_once(
    redis_server: RedisServer, redis: RedisClient, kind: str
) -> None:
    await _load(redis, kind, 6)
    env = {"PROCS_URL": redis_server.url, "PROCS_KEY": "jobs"}
    async with app(kind, kill_at=KillPoint.inside_handler(3), env=env) as p:
        assert await p.killed() == -signal.SIGKILL
    first = p.lines()
    assert [line for line in first if line.startswith("begin ")][-1] == "begin 3 1"
    assert 3 not in _ended(first)  # killed under way
    second = (await _finish(redis_server, kind, 6, first)).lines()
    runs = _runs(first + second)
    assert runs[3] == [1, 2]  # redelivered; the killed run counted once
    for n, attempts in runs.items():
        assert attempts == list(range(1, len(attempts) + 1)), (n, attempts)  # one per run
    assert _ended(first + second) == set(range(1, 7))
    assert await _outstanding(redis, kind) == 0


@pytest.mark.parametrize("journal", ["kept", "lost"])
@pytest.mark.parametrize("kind", ["group_consumer", "list_consumer"])
async def test_killed_between_a_settle_and_its_flush_the_message_is_never_lost(
    redis_server: RedisServer, redis: RedisClient, kind: str, journal: str, tmp_path: Path
) -> None:
    await _load(redis, kind, 6)
    env = {"PROCS_URL": redis_server.url, "PROCS_KEY": "jobs"}
    point = KillPoint.between_settle_and_flush(1)
    async with app(kind, kill_at=point, hold=True, env=env) as p:
        await p.reached()
        # Held: the first ack is in the window, and the server has not been told.
        assert _ended(p.lines()) == {1}
        assert await _outstanding(redis, kind) >= 1
        assert await p.killed() == -signal.SIGKILL
    first = p.lines()
    # The successor runs on this machine (it finds its predecessor's run journal) or on
    # another one (a state directory of its own: the journal is lost with the machine).
    elsewhere = {"TRIO_STREAMS_STATE_DIR": str(tmp_path)} if journal == "lost" else {}
    successor = await _finish(redis_server, kind, 6, first, elsewhere)
    second = successor.lines()
    runs = _runs(first + second)
    if journal == "kept":
        # The journal says the run ended: the successor settles it without running it again.
        assert runs[1] == [1]
    else:
        assert runs[1] == [1, 1]  # delivered again and handled again: a duplicate
    assert _ended(first + second) == set(range(1, 7))  # never lost
    assert await _outstanding(redis, kind) == 0


@pytest.mark.parametrize("kind", ["group_consumer", "list_consumer"])
async def test_with_the_pipeline_a_settle_killed_before_its_flush_runs_again_on_this_machine(
    redis_server: RedisServer, redis: RedisClient, kind: str
) -> None:
    await _load(redis, kind, 6)
    env = {"PROCS_URL": redis_server.url, "PROCS_KEY": "jobs", "PROCS_PIPELINE": "1"}
    async with app(kind, kill_at=KillPoint.between_settle_and_flush(1), env=env) as p:
        assert await p.killed() == -signal.SIGKILL
    first = p.lines()
    assert _ended(first) == {1}
    # The handler's segment was in the flush that never went out: the journal does not say
    # the run finished, so the successor on the same machine runs the message again.
    second = (await _finish(redis_server, kind, 6, first, {"PROCS_PIPELINE": "1"})).lines()
    runs = _runs(first + second)
    assert runs[1] == [1, 2]  # run again, the killed run counted as an attempt
    assert _ended(first + second) == set(range(1, 7))  # never lost
    assert await _outstanding(redis, kind) == 0
