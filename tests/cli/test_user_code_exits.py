"""A handler, startup hook or task that raises a ``BaseException`` other than a cancellation
(``sys.exit(3)``, a ``BaseException`` subclass) stops ``trio-streams run`` as a failure does:
one line naming what raised it, the app drained and stopped, exit status 1."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from .support import cli, stderr_lines, stream_file

PREFIX = "trio-streams run: "


def run(target: str, path: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {"STREAM_FILE": str(path)} if path is not None else {}
    return cli("run", f"tests.cli.exiting_apps:{target}", env=env)


def the_failure(result: subprocess.CompletedProcess[str]) -> str:
    """The one line on stderr that names the failure (logs go to stderr too)."""
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    [line] = [line for line in stderr_lines(result) if line.startswith(PREFIX)]
    return line


@pytest.mark.slow
def test_a_handler_that_calls_sys_exit_is_one_line_naming_the_handler_and_exit_1(
    tmp_path: Path,
) -> None:
    path = stream_file(tmp_path / "orders.ss", 3)
    result = run("handler_exits", path)
    line = the_failure(result)
    assert "handler h of subscription 'orders' raised SystemExit(3)" in line, result.stderr


@pytest.mark.slow
def test_a_handler_that_calls_sys_exit_stops_the_app_as_a_failure_does(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "orders.ss", 3)
    result = run("handler_exits", path)
    assert result.returncode == 1, result.stderr
    assert "every subscription has ended" not in result.stderr
    assert "app 'exits' stopped" in result.stderr, result.stderr


@pytest.mark.slow
def test_the_message_the_handler_exited_on_is_not_lost(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "orders.ss", 3)
    run("handler_exits", path)
    again = run("handler_exits", path)  # the durable consumer resumes at the message it left
    assert "raised SystemExit(3)" in the_failure(again)


def test_a_startup_hook_that_calls_sys_exit_is_one_line_naming_the_hook_and_exit_1() -> None:
    line = the_failure(run("hook_exits"))
    assert "app 'hook-exits' did not start" in line
    assert "the on_startup hook configure raised SystemExit(4)" in line


def test_a_task_that_raises_a_base_exception_is_one_line_naming_the_task_and_exit_1() -> None:
    line = the_failure(run("task_exits"))
    assert "app 'task-exits' stopped" in line
    assert "task heartbeat raised Shutdown('the heartbeat gave up')" in line
