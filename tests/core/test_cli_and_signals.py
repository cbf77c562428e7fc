"""``trio-streams run`` in a real subprocess: signals, draining, exit codes."""

import os
import signal
import subprocess
import sys

import trio

from tests.cli.support import ROOT, Lines, cli


async def run_app(*args: str, mood: str = "finishes") -> trio.Process:
    return await trio.lowlevel.open_process(
        [sys.executable, "-m", "trio_streams", "run", *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HANDLER": mood, "PYTHONUNBUFFERED": "1"},
    )


async def test_sigterm_drains_the_handler_in_flight_then_exits_cleanly() -> None:
    with trio.fail_after(30):
        process = await run_app("tests.apps.signals_app:app")
        lines = Lines(process)
        await lines.wait_for("handling")
        process.send_signal(signal.SIGTERM)
        output = await lines.rest()
        assert await process.wait() == 0
    order = [line for line in output if line in {"draining", "handled", "closed", "cancelled"}]
    assert order == ["draining", "handled", "closed"]


async def test_a_second_signal_cancels_at_once() -> None:
    with trio.fail_after(30):  # the app's own drain would wait 60 s
        process = await run_app("tests.apps.signals_app:app", mood="stuck")
        lines = Lines(process)
        await lines.wait_for("handling")
        process.send_signal(signal.SIGINT)
        await lines.wait_for("draining")
        process.send_signal(signal.SIGINT)
        output = await lines.rest()
        assert await process.wait() == 130
    assert "cancelled" in output
    assert "handled" not in output


async def test_shutdown_timeout_from_the_command_line_bounds_the_drain() -> None:
    with trio.fail_after(30):
        process = await run_app(
            "tests.apps.signals_app:app", "--shutdown-timeout", "0.2", mood="stuck"
        )
        lines = Lines(process)
        await lines.wait_for("handling")
        process.send_signal(signal.SIGINT)
        output = await lines.rest()
        assert await process.wait() == 0
    assert "cancelled" in output and "closed" in output
    assert any("abandoning 1 delivery" in line for line in output)


def test_a_failing_app_exits_1_and_says_why() -> None:
    result = cli("run", "tests.apps.failing_app:app")
    assert result.returncode == 1
    assert (
        "trio-streams run: app 'doomed' stopped: subscription 'work' failed: "
        "OSError('the disk is on fire')" in result.stderr
    )


def test_run_explains_a_target_that_is_not_an_app() -> None:
    for target, message in [
        ("tests.apps.signals_app", "expected MODULE:ATTRIBUTE"),
        ("tests.apps.nowhere:app", "cannot import 'tests.apps.nowhere'"),
        ("tests.apps.signals_app:nope", "has no attribute 'nope'"),
        ("tests.apps.signals_app:broker", "is MemoryBroker, not a trio_streams.App"),
    ]:
        result = subprocess.run(
            [sys.executable, "-m", "trio_streams", "run", target],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert result.returncode == 2, result.stderr
        assert message in result.stderr


def test_version_on_the_command_line() -> None:
    from trio_streams import __version__

    result = subprocess.run(
        [sys.executable, "-m", "trio_streams", "--version"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    assert result.stdout.strip() == f"trio-streams {__version__}"
