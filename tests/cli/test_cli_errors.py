"""Clean errors (one line on stderr, no traceback) and the right exit status, in real processes."""

from __future__ import annotations

import argparse
import signal
import subprocess
from pathlib import Path

import pytest

from .support import COMMAND, ROOT, cli, run_command, stderr_lines, stream_file

#: Enough output that a pipe nobody reads fills up, so the command is still writing.
MESSAGES = 20_000


def decode(path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [*COMMAND, "file", "decode", str(path)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_decode_into_a_pipe_closed_early_exits_quietly_like_the_coreutils(
    tmp_path: Path,
) -> None:
    path = stream_file(tmp_path / "big.ss", MESSAGES)
    process = decode(path)
    assert process.stdout is not None and process.stderr is not None
    assert b" orders #1 " in process.stdout.readline()
    process.stdout.close()  # `| head -1` has what it wanted
    assert process.wait(timeout=60) == 128 + signal.SIGPIPE
    assert process.stderr.read() == b""  # no traceback, no "Exception ignored"
    process.stderr.close()


def test_decode_piped_into_head_in_a_shell_prints_nothing_on_stderr(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "big.ss", MESSAGES)
    command = " ".join([*COMMAND, "file", "decode", str(path)])
    result = run_command(["/bin/sh", "-c", f"{command} | head -n 2"])
    assert result.returncode == 0
    assert len(result.stdout.splitlines()) == 2
    assert result.stderr == ""


def test_ctrl_c_during_decode_exits_130_without_a_traceback(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "big.ss", MESSAGES)
    process = decode(path)
    assert process.stdout is not None
    assert b" orders #1 " in process.stdout.readline()
    process.send_signal(signal.SIGINT)  # while it writes into the full pipe
    _, stderr = process.communicate(timeout=60)
    assert process.returncode == 130
    assert stderr == b""


@pytest.mark.parametrize("command", ["decode", "tail", "stat"])
def test_decode_tail_and_stat_on_a_directory_say_so_and_exit_1(
    tmp_path: Path, command: str
) -> None:
    result = cli("file", command, str(tmp_path))
    assert result.returncode == 1
    assert stderr_lines(result) == [f"error: {tmp_path}: is a directory, not a stream file"]


def test_an_unknown_log_level_is_refused_by_the_parser_with_status_2() -> None:
    result = cli("run", "tests.cli.apps:hooky", "--log-level", "verbose")
    assert result.returncode == 2
    assert "argument --log-level: invalid choice: 'verbose'" in result.stderr
    assert "Traceback" not in result.stderr


def test_the_log_level_is_case_insensitive() -> None:
    result = cli("run", "tests.cli.apps:hooky", "--log-level", "DEBUG")
    assert result.returncode == 1  # the hook fails; the level was taken
    assert "Traceback" in result.stderr


@pytest.mark.parametrize("value", ["-3", "nan", "soon"])
def test_a_shutdown_timeout_that_is_not_seconds_is_refused_at_parse_with_status_2(
    value: str,
) -> None:
    result = cli("run", "tests.cli.apps:hooky", "--shutdown-timeout", value)
    assert result.returncode == 2
    assert "argument --shutdown-timeout: " in result.stderr
    assert "Traceback" not in result.stderr
    assert "did not start" not in result.stderr  # refused before the app was loaded


@pytest.mark.parametrize(
    ("target", "message"),
    [
        (
            "not_an_app",
            "--factory: tests.cli.apps:not_an_app is 42, not callable; --factory needs a "
            "function that returns the App",
        ),
        (
            "hooky",
            "--factory: tests.cli.apps:hooky is App('hooky'), not callable",
        ),
        ("make_nothing", "--factory: tests.cli.apps:make_nothing() returned int, not a"),
        ("make_app_async", "--factory: tests.cli.apps:make_app_async is an async function"),
    ],
)
def test_factory_on_what_is_not_an_app_factory_names_the_object(target: str, message: str) -> None:
    result = cli("run", f"tests.cli.apps:{target}", "--factory")
    assert result.returncode == 2
    lines = stderr_lines(result)
    assert len(lines) == 1 and lines[0].startswith(f"trio-streams run: {message}"), lines
    assert "Traceback" not in result.stderr and "RuntimeWarning" not in result.stderr


def test_a_factory_that_raises_is_a_runtime_error_naming_it_with_exit_1() -> None:
    result = cli("run", "tests.cli.apps:make_broken", "--factory")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "trio-streams run: --factory: calling tests.cli.apps:make_broken() failed: LookupError: "
        "no configuration for this environment; --log-level debug shows the traceback"
    ]


def test_factory_that_returns_the_app_runs_it() -> None:
    result = cli("run", "tests.cli.apps:make_app", "--factory")
    assert result.returncode == 1  # hooky's hook fails: the app was found and started
    assert "app 'hooky' did not start" in result.stderr


def test_an_app_given_where_a_factory_is_expected_points_at_factory() -> None:
    result = cli("run", "tests.cli.apps:make_app")
    assert result.returncode == 2
    assert stderr_lines(result) == [
        "trio-streams run: tests.cli.apps:make_app is function, not a trio_streams.App "
        "(is it a factory? add --factory)"
    ]


def test_a_json_array_line_given_to_file_write_names_the_line(tmp_path: Path) -> None:
    target = tmp_path / "out.ss"
    good = '{"stream_key": "orders", "seq": 1, "timestamp_ms": 1, "payload": "a"}'
    result = cli("file", "write", str(target), stdin=f"{good}\n[1, 2]\n")
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: line 2: a JSON object belongs here, one message a line")
    assert lines[0].endswith("not an array")
    assert not target.exists()


@pytest.mark.parametrize(
    ("error", "status"), [(BrokenPipeError(), 128 + signal.SIGPIPE), (KeyboardInterrupt(), 130)]
)
def test_a_broken_pipe_or_ctrl_c_inside_a_commands_nursery_exits_as_a_bare_one(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    error: BaseException,
    status: int,
) -> None:
    from trio_streams import cli as command_line

    def fail(args: argparse.Namespace) -> int:
        raise BaseExceptionGroup("from a nursery", [error])

    def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        commands.add_parser("fail").set_defaults(handler=fail)

    monkeypatch.setattr(command_line, "_registrars", lambda: [register])
    assert command_line.main(["fail"]) == status
    assert capsys.readouterr().err == ""
