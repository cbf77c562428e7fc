"""How ``trio-streams run`` tells a wrong target (usage, exit 2) from a module whose own code
raised while importing (a runtime error, exit 1, a crash to restart under ``--workers``), how
``--reload`` survives a file saved mid-edit, a durable stream-file consumer refused with
``--workers`` before any worker starts, and a stream-file group run in workers. Real processes,
real files in ``tmp_path``."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from tests.redis.streams.procs import Consumer
from trio_streams import App
from trio_streams.file import FileBroker, FileStream
from trio_streams.file.writer import StreamWriter
from trio_streams.running.supervisor import check_workers

from .support import COMMAND, stderr_lines

PREFIX = "trio-streams run: "
CLI = "trio_streams"

GOOD = """\
from trio_streams import App, MemoryBroker
app = App("live")
app.broker(MemoryBroker())

@app.on_startup
async def hello() -> None:
    print("version {version}", flush=True)
"""

#: Imports in the supervisor, raises in every worker (they have TRIO_STREAMS_WORKER).
RAISES_IN_WORKERS = """\
import os
from trio_streams import App, MemoryBroker
if "TRIO_STREAMS_WORKER" in os.environ:
    raise RuntimeError("config missing DB_URL")
app = App("svc")
app.broker(MemoryBroker())
"""


def _env(directory: Path) -> dict[str, str]:
    return {"PYTHONPATH": os.pathsep.join([str(directory), os.environ.get("PYTHONPATH", "")])}


def run_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``trio-streams run ARGS`` with ``directory`` as the current (importable) one."""
    return subprocess.run(
        [*COMMAND, "run", *args],
        cwd=directory,
        env={**os.environ, **_env(directory)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.slow
def test_a_module_that_raises_while_importing_is_one_line_naming_it_and_exit_1(
    tmp_path: Path,
) -> None:
    (tmp_path / "svc.py").write_text('raise RuntimeError("config missing DB_URL")\n')
    result = run_in(tmp_path, "svc:app")
    assert result.returncode == 1, result.stderr
    assert stderr_lines(result) == [
        f"{PREFIX}importing 'svc' failed: RuntimeError: config missing DB_URL; "
        "--log-level debug shows the traceback"
    ]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("source", "cause"),
    [
        ("app = App(\n", "SyntaxError: "),
        ("import no_such_dependency_here\n", "ModuleNotFoundError: No module named"),
    ],
)
def test_a_module_with_a_syntax_error_or_a_missing_dependency_is_a_runtime_error(
    tmp_path: Path, source: str, cause: str
) -> None:
    (tmp_path / "svc.py").write_text(source)
    result = run_in(tmp_path, "svc:app")
    assert result.returncode == 1, result.stderr
    [line] = stderr_lines(result)
    assert line.startswith(f"{PREFIX}importing 'svc' failed: {cause}"), line


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "says"),
    [
        ("nowhere:app", "cannot import 'nowhere': No module named 'nowhere'"),
        ("nowhere.deeper:app", "cannot import 'nowhere.deeper': No module named 'nowhere'"),
        ("svc:missing", "'svc' has no attribute 'missing'"),
        ("svc:value", "svc:value is int, not a trio_streams.App"),
        ("svc", "expected MODULE:ATTRIBUTE"),
    ],
)
def test_only_a_wrong_target_is_a_usage_error(tmp_path: Path, target: str, says: str) -> None:
    (tmp_path / "svc.py").write_text("value = 42\n")
    result = run_in(tmp_path, target)
    assert result.returncode == 2, result.stderr
    [line] = stderr_lines(result)
    assert line.startswith(f"{PREFIX}{says}"), line


@pytest.mark.slow
async def test_under_workers_a_module_that_raises_while_importing_is_restarted_as_a_crash(
    tmp_path: Path,
) -> None:
    (tmp_path / "svc.py").write_text(RAISES_IN_WORKERS)
    running = Consumer(
        "run", "svc:app", "--workers", "2", "--restart-backoff", "0.01", "--crash-limit", "2",
        module=CLI, with_stderr=True, cwd=tmp_path, env=_env(tmp_path),
    )  # fmt: skip
    try:
        assert await running.wait_exit(within=60) == 1
    finally:
        running.stop()
    text = "\n".join(running.lines)
    for index in (0, 1):
        assert (
            f"trio-streams run [worker {index}]: importing 'svc' failed: "
            "RuntimeError: config missing DB_URL"
        ) in text
    assert "exited with status 1; restarting in" in text
    assert "crashed 2 times" in text and "giving up" in text
    assert "command line or target is wrong" not in text


@pytest.mark.slow
async def test_reload_keeps_watching_when_a_file_is_saved_with_a_syntax_error(
    tmp_path: Path,
) -> None:
    module = tmp_path / "live.py"
    module.write_text(GOOD.format(version=1))
    running = Consumer(
        "run", "live:app", "--reload", module=CLI, with_stderr=True, cwd=tmp_path,
        env=_env(tmp_path),
    )  # fmt: skip
    try:
        await running.wait_line("version 1", within=30)
        await running.wait_text("live: running", within=30)
        module.write_text('from trio_streams import App\napp = App("live"\n')  # mid-edit
        await running.wait_text("importing 'live' failed: SyntaxError", within=30)
        await running.wait_text("starting it again at the next change", within=30)
        module.write_text(GOOD.format(version=2))
        await running.wait_line("version 2", within=30)
        running.signal(signal.SIGTERM)
        assert await running.wait_exit(within=30) == 0
    finally:
        running.stop()
    assert not any("giving up" in line for line in running.lines)


@pytest.mark.slow
def test_a_durable_file_consumer_is_refused_with_workers_even_with_allow_broadcast(
    tmp_path: Path,
) -> None:
    (tmp_path / "svc.py").write_text(
        "from trio_streams import App\n"
        "from trio_streams.file import FileBroker, FileStream\n"
        'app = App("svc")\n'
        'broker = app.broker(FileBroker("orders.ss"))\n'
        '@broker.subscriber(FileStream("orders", durable="live"), name="orders")\n'
        "async def take(n: int) -> None: ...\n"
    )
    for extra in ([], ["--allow-broadcast"]):
        result = run_in(tmp_path, "svc:app", "--workers", "2", *extra)
        assert result.returncode == 2, result.stderr
        [line] = stderr_lines(result)
        assert line.startswith(f"{PREFIX}--workers 2: subscription 'orders' "), line
        assert "is the consumer 'live', which one process at a time can run" in line
    assert not (tmp_path / "orders.ss").exists()  # no worker started, nothing opened


#: Two workers replay a file as members of one group: each writes what it handled to a file.
GROUP_MEMBERS = """\
import os
from trio_streams import App
from trio_streams.file import FileBroker, FileStream
app = App("svc")
broker = app.broker(FileBroker("orders.ss", existing_only=True))
WORKER = os.environ.get("TRIO_STREAMS_WORKER", "-")

@broker.subscriber(FileStream("orders").replay().group("billing", claim=8), name="bill")
async def bill(n: int) -> None:
    fd = os.open("handled.txt", os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, f"{WORKER} {n}\\n".encode())
    finally:
        os.close(fd)
"""


def test_check_workers_accepts_a_file_group_and_still_refuses_the_file_read_whole(
    tmp_path: Path,
) -> None:
    app = App("svc")
    broker = app.broker(FileBroker(tmp_path / "orders.ss"))
    broker.subscriber(FileStream("orders").group("billing"), name="bill")(_take)
    broker.subscriber(FileStream("orders").replay().group("audit", ordered=True), name="audit")(
        _take
    )
    assert check_workers(app, 2, allow_broadcast=False) == []
    broker.subscriber(FileStream("orders"), name="read")(_take)
    [problem] = check_workers(app, 2, allow_broadcast=False)
    assert problem.startswith("subscription 'read' (FileStream('orders'))"), problem


@pytest.mark.slow
def test_a_file_group_runs_in_workers_each_message_handled_once(tmp_path: Path) -> None:
    messages = 200
    with StreamWriter(tmp_path / "orders.ss") as writer:
        for n in range(1, messages + 1):
            writer.append("orders", str(n).encode())
    (tmp_path / "svc.py").write_text(GROUP_MEMBERS)
    result = run_in(tmp_path, "svc:app", "--workers", "2")
    assert result.returncode == 0, result.stderr
    # Each worker's member ends once the group has nothing left; neither is restarted.
    assert result.stderr.count("its app finished by itself") == 2, result.stderr
    handled = [line.split() for line in (tmp_path / "handled.txt").read_text().splitlines()]
    assert sorted(int(n) for _, n in handled) == list(range(1, messages + 1))
    assert {worker for worker, _ in handled} <= {"0", "1"}


async def _take(n: int) -> None:
    """The handler of a subscription that is mounted, never run."""
