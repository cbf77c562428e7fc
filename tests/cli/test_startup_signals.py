"""A SIGINT or SIGTERM at any moment of ``trio-streams run``'s start-up stops it at once, with
one log line and no traceback: while the app is imported, in an ``on_startup`` hook, right
after the process was spawned, and in the workers of ``--workers``. A process started in the
background by a shell (``&``) inherits SIGINT ignored, and is stopped by it all the same.

Each test runs the command in a real subprocess and waits for the line the app prints when it
reaches the stage (``tests/cli/startup_apps.py``), then signals it.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest
import trio

from .support import assert_stopped_starting, run_process, signal_lines

APP = "tests.cli.startup_apps:app"


def fifo(tmp_path: Path) -> dict[str, str]:
    path = tmp_path / "import.fifo"
    os.mkfifo(path)
    return {"TS_FIFO": str(path)}


#: A ``sitecustomize`` that pauses the interpreter when it first imports Trio (trio-streams
#: itself is being imported): it prints ``importing trio`` and reads the fifo ``TS_FIFO``.
PAUSE_AT_TRIO_IMPORT = """
import os, sys

_paused = []


def _pause(event, args):
    if event == "import" and args[0] == "trio" and not _paused:
        _paused.append(True)
        os.write(1, b"importing trio\\n")
        with open(os.environ["TS_FIFO"], "rb") as fifo:
            fifo.read()


sys.addaudithook(_pause)
"""


def paused_at_trio_import(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(PAUSE_AT_TRIO_IMPORT)
    path = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
    return {**fifo(tmp_path), "PYTHONPATH": path}


async def test_ctrl_c_while_trio_streams_itself_is_imported_stops_without_a_traceback(
    tmp_path: Path,
) -> None:
    async with run_process(APP, env=paused_at_trio_import(tmp_path)) as process:
        with trio.fail_after(20):
            await process.lines.wait_for("importing trio")
        process.signal(signal.SIGINT)
        status, output = await process.finish()
    assert_stopped_starting(status, output, name="SIGINT")


async def test_sigint_while_trio_streams_itself_is_imported_stops_a_background_process(
    tmp_path: Path,
) -> None:
    env = paused_at_trio_import(tmp_path)
    async with run_process(APP, in_background=True, env=env) as process:
        with trio.fail_after(20):
            await process.lines.wait_for("importing trio")
        process.signal(signal.SIGINT)
        status, output = await process.finish()
    assert_stopped_starting(status, output, name="SIGINT")


@pytest.mark.slow
async def test_sigint_while_the_app_is_imported_stops_a_background_process(
    tmp_path: Path,
) -> None:
    async with run_process(APP, stage="import", in_background=True, env=fifo(tmp_path)) as process:
        with trio.fail_after(20):
            await process.lines.wait_for("importing")
        process.signal(signal.SIGINT)
        status, output = await process.finish()
    assert_stopped_starting(status, output, name="SIGINT")
    assert "trio-streams run: " in signal_lines(output)[0]


async def test_sigterm_while_the_app_is_imported_stops_at_once(tmp_path: Path) -> None:
    async with run_process(APP, stage="import", env=fifo(tmp_path)) as process:
        with trio.fail_after(20):
            await process.lines.wait_for("importing")
        process.signal(signal.SIGTERM)
        status, output = await process.finish()
    assert_stopped_starting(status, output, name="SIGTERM")


async def test_ctrl_c_in_an_on_startup_hook_stops_at_once_without_a_traceback() -> None:
    async with run_process(APP, stage="hook") as process:
        with trio.fail_after(20):
            await process.lines.wait_for("in on_startup")
        process.signal(signal.SIGINT)
        status, output = await process.finish()
    assert_stopped_starting(status, output, name="SIGINT")
    assert "starting: SIGINT received while starting" in signal_lines(output)[0]


@pytest.mark.slow
async def test_sigint_in_an_on_startup_hook_stops_a_background_process() -> None:
    async with run_process(APP, stage="hook", in_background=True) as process:
        with trio.fail_after(20):
            await process.lines.wait_for("in on_startup")
        process.signal(signal.SIGINT)
        status, output = await process.finish()
    assert_stopped_starting(status, output, name="SIGINT")


def assert_stopped_right_after_spawn(status: int, output: list[str]) -> None:
    """Before the interpreter runs any of trio-streams' code, SIGTERM's default action ends
    the process, silently; from then on it stops with its one line."""
    if status == -signal.SIGTERM:
        assert output == [], output
    else:
        assert_stopped_starting(status, output, name="SIGTERM")


async def test_sigterm_right_after_spawn_stops_the_process() -> None:
    async with run_process(APP) as process:
        process.signal(signal.SIGTERM)
        status, output = await process.finish()
    assert_stopped_right_after_spawn(status, output)


async def test_sigint_once_running_still_drains_in_a_background_process() -> None:
    async with run_process(APP, in_background=True) as process:
        with trio.fail_after(20):
            await process.lines.wait_for("running")
        process.signal(signal.SIGINT)
        status, output = await process.finish()
    assert status == 0, output
    lines = signal_lines(output)
    assert len(lines) == 1 and "SIGINT received, shutting down gracefully" in lines[0], output


@pytest.mark.slow
async def test_workers_signalled_in_their_on_startup_hooks_stop_at_once() -> None:
    async with run_process(APP, "--workers", "2", stage="hook", in_background=True) as process:
        with trio.fail_after(30):
            await process.lines.wait_for("worker 0: in on_startup")
            await process.lines.wait_for("worker 1: in on_startup")
        process.signal(signal.SIGINT)
        status, output = await process.finish(within=30)
    text = "\n".join(output)
    assert status == 0, text  # the supervisor was running: one signal is a graceful stop
    assert "Traceback" not in text, text
    supervisor = [line for line in signal_lines(output) if "supervisor:" in line]
    assert len(supervisor) == 1 and "SIGINT received, draining the workers" in supervisor[0]
    workers = [line for line in signal_lines(output) if "supervisor:" not in line]
    assert len(workers) == 2, text  # one line from each worker, which was starting
    assert all("SIGTERM received while starting, stopping at once" in line for line in workers)
    assert "restarting" not in text, text


async def test_a_supervisor_signalled_while_importing_the_app_stops_at_once(
    tmp_path: Path,
) -> None:
    async with run_process(APP, "--workers", "2", stage="import", env=fifo(tmp_path)) as process:
        with trio.fail_after(20):
            await process.lines.wait_for("worker -: importing")  # the supervisor's own import
        process.signal(signal.SIGTERM)
        status, output = await process.finish()
    assert_stopped_starting(status, output, name="SIGTERM")
    assert not any("started (pid" in line for line in output), output


async def test_a_supervisor_signalled_right_after_spawn_stops() -> None:
    async with run_process(APP, "--workers", "2") as process:
        process.signal(signal.SIGTERM)
        status, output = await process.finish()
    assert_stopped_right_after_spawn(status, output)


async def test_app_run_in_a_script_signalled_in_an_on_startup_hook_stops_at_once() -> None:
    async with run_process(stage="hook", module="tests.cli.startup_apps") as process:
        with trio.fail_after(20):
            await process.lines.wait_for("in on_startup")
        process.signal(signal.SIGTERM)
        status, output = await process.finish()
    # app.run() returned False: the script's own exit status says the start was cut short.
    assert_stopped_starting(status, output, name="SIGTERM")
