"""``trio-streams run --workers N`` and ``--reload``, with real processes and a real server."""

from __future__ import annotations

import os
import re
import signal
from pathlib import Path

import pytest
import trio

from tests.cli.support import cli, stderr_lines, stream_file
from tests.redis.client.redis_waits import eventually
from tests.redis.streams.procs import Consumer
from tests.redis_servers import RedisServer
from trio_streams.redis.client import RedisClient

CLI = "trio_streams"


def supervisor(url: str, *args: str, cwd: Path | None = None) -> Consumer:
    extra = {"cwd": cwd} if cwd is not None else {}
    return Consumer(
        "run", *args, module=CLI, env={"TS_TEST_REDIS_URL": url}, with_stderr=True, **extra
    )


def worker_pids(process: Consumer) -> dict[int, int]:
    """The pid each worker slot started last, from the supervisor's log."""
    pids: dict[int, int] = {}
    for line in process.lines:
        found = re.search(r"worker (\d+): started \(pid (\d+)\)", line)
        if found:
            pids[int(found[1])] = int(found[2])
    return pids


async def wait_running(process: Consumer, app: str, count: int) -> None:
    """Until ``count`` runs of ``app`` have started (their banner): a signal before that
    stops a worker at once, as it was starting, instead of draining it."""

    async def started() -> bool:
        await trio.lowlevel.checkpoint()
        return sum(f"{app}: running" in line for line in process.lines) >= count

    await eventually(started, within=30, what=f"{count} run(s) of {app} started")


@pytest.mark.slow
async def test_three_workers_share_a_group_and_a_killed_one_is_restarted_and_nothing_is_lost(
    redis_server: RedisServer, redis: RedisClient
) -> None:
    entries = 600
    for n in range(entries):
        await redis.execute("XADD", "jobs", "*", "_payload", str(n))
    running = supervisor(redis_server.url, "tests.cli.worker_apps:group", "--workers", "3")
    try:
        for index in range(3):
            await running.wait_line(f"worker {index} pid")

        async def some_handled() -> bool:
            # Worker 1 among them: on a loaded machine it may join the group late, and the
            # others could drain the stream before it (or its restart) takes any entry.
            by = await redis.execute("LRANGE", "by", 0, -1)
            handled = int(await redis.execute("SCARD", "handled"))
            return handled >= 100 and any(line.startswith(b"1:") for line in by)

        await eventually(some_handled, within=30, what="100 entries handled, some by worker 1")
        victim = worker_pids(running)[1]
        os.kill(victim, signal.SIGKILL)  # mid-run, entries in its hands
        await running.wait_text("worker 1: killed by SIGKILL; restarting")

        async def restarted() -> bool:
            await trio.lowlevel.checkpoint()
            return worker_pids(running)[1] != victim

        await eventually(restarted, what="worker 1 started again")

        async def all_handled() -> bool:
            return int(await redis.execute("SCARD", "handled")) == entries

        await eventually(all_handled, within=60, what="every entry handled")

        async def nothing_pending() -> bool:
            summary = await redis.execute("XPENDING", "jobs", "g")
            return int(summary[0]) == 0

        await eventually(nothing_pending, within=30, what="an empty pending list")
        running.signal(signal.SIGTERM)
        assert await running.wait_exit(within=30) == 0
    finally:
        running.stop()
    workers = {line.split(b":")[0] for line in await redis.execute("LRANGE", "by", 0, -1)}
    assert workers == {b"0", b"1", b"2"}  # the work was shared
    assert any("draining the workers" in line for line in running.lines)


@pytest.mark.slow
async def test_the_first_signal_drains_every_worker_and_the_supervisor_exits_0(
    redis_server: RedisServer,
) -> None:
    running = supervisor(redis_server.url, "tests.cli.worker_apps:group", "--workers", "2")
    try:
        await wait_running(running, "group", 2)
        running.signal(signal.SIGINT)
        assert await running.wait_exit(within=30) == 0
    finally:
        running.stop()
    stopped = [line for line in running.lines if "group: stopped" in line]
    assert len(stopped) == 2  # each worker drained and stopped; none was killed


@pytest.mark.slow
async def test_a_worker_that_keeps_crashing_makes_the_supervisor_give_up_and_exit_1(
    redis_server: RedisServer,
) -> None:
    running = supervisor(
        redis_server.url,
        "tests.cli.worker_apps:crashing",
        "--workers",
        "2",
        "--restart-backoff",
        "0.01",
        "--crash-limit",
        "3",
    )
    try:
        assert await running.wait_exit(within=60) == 1
    finally:
        running.stop()
    assert any("giving up" in line and "crashed 3 times" in line for line in running.lines)
    assert any("database unreachable" in line for line in running.lines)


@pytest.mark.slow
def test_a_subscription_every_worker_would_read_whole_is_refused_at_start(tmp_path: Path) -> None:
    env = {"TS_TEST_FILE": str(tmp_path / "orders.ss")}
    result = cli("run", "tests.cli.worker_apps:broadcast", "--workers", "2", env=env)
    assert result.returncode == 2
    [line] = stderr_lines(result)
    assert "--workers 2: subscription 'read'" in line
    assert "would deliver every message to each of the 2 workers" in line
    assert "--allow-broadcast" in line


def test_a_consumer_name_fixed_in_the_code_is_refused_with_workers() -> None:
    result = cli("run", "tests.cli.worker_apps:named", "--workers", "2")
    assert result.returncode == 2
    [line] = stderr_lines(result)
    assert "names the consumer 'c1': 2 workers would be that one consumer" in line


@pytest.mark.slow
async def test_allow_broadcast_runs_every_worker_on_the_whole_file(tmp_path: Path) -> None:

    path = stream_file(tmp_path / "orders.ss", 3)
    running = Consumer(
        "run", "tests.cli.worker_apps:broadcast", "--workers", "2", "--allow-broadcast",
        module=CLI, env={"TS_TEST_FILE": str(path)}, with_stderr=True,
    )  # fmt: skip
    try:
        # A replay ends by itself: each worker's app finishes, and is not restarted.
        assert await running.wait_exit(within=30) == 0
    finally:
        running.stop()
    finished = [line for line in running.lines if "its app finished by itself" in line]
    assert len(finished) == 2


@pytest.mark.slow
async def test_a_worker_whose_supervisor_is_killed_drains_and_stops(
    redis_server: RedisServer,
) -> None:
    running = supervisor(redis_server.url, "tests.cli.worker_apps:group", "--workers", "1")
    try:
        await running.wait_line("worker 0 pid")
        pid = worker_pids(running)[0]
    finally:
        running.kill()  # the supervisor dies without a word

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return False

    async def worker_gone() -> bool:
        await trio.lowlevel.checkpoint()
        return gone()

    await eventually(worker_gone, within=30, what="the orphaned worker to stop")


@pytest.mark.slow
async def test_reload_restarts_the_app_with_the_edited_code_after_a_clean_drain(
    tmp_path: Path,
) -> None:
    module = tmp_path / "edited.py"
    source = (
        "from trio_streams import App\n"
        "from trio_streams.memory import MemoryBroker\n"
        "app = App('edited')\n"
        "app.broker(MemoryBroker())\n"
        "@app.on_startup\n"
        "async def hello() -> None:\n"
        "    print('version {}', flush=True)\n"
    )
    module.write_text(source.format(1))
    running = Consumer(
        "run", "edited:app", "--reload", module=CLI, with_stderr=True, cwd=tmp_path,
        env={"PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])},
    )  # fmt: skip
    try:
        await running.wait_line("version 1")
        module.write_text(source.format(2))
        await running.wait_line("version 2", within=30)
        await wait_running(running, "edited", 2)
        running.signal(signal.SIGTERM)
        assert await running.wait_exit(within=30) == 0
    finally:
        running.stop()
    assert any("edited.py changed, restarting" in line for line in running.lines)
    assert any("edited: stopped" in line for line in running.lines)  # drained, not killed


@pytest.mark.slow
@pytest.mark.parametrize("args", [["--reload", "--workers", "2"], ["--workers", "0"]])
def test_bad_process_options_are_a_usage_error(args: list[str]) -> None:
    result = cli("run", "tests.cli.worker_apps:group", *args)
    assert result.returncode == 2
