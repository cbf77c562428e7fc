"""A failure that stops ``trio-streams run`` (or ``app.run()``) is one line per error on
stderr, naming the cause and what to do, with a non-zero exit; the traceback only at DEBUG."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from trio_streams.file.durable import DurableStore

from .support import cli, run_command, stderr_lines, stream_file

PREFIX = "trio-streams run: "


def run(target: str, path: Path | None = None, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"STREAM_FILE": str(path)} if path is not None else {}
    return cli("run", f"tests.cli.apps:{target}", *args, env=env)


def the_one_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stderr
    lines = stderr_lines(result)
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(PREFIX), result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    return lines[0]


def test_a_missing_file_is_one_line_that_names_it_and_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.ss"
    line = the_one_line(run("missing", path))
    assert line.startswith(f"{PREFIX}app 'missing' did not start: {path}: no such stream file")
    assert "leave existing_only out" in line


@pytest.mark.slow
def test_a_replay_of_a_mistyped_path_exits_1_with_one_line_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "ordres.ss"
    line = the_one_line(run("typo", path))
    assert line.startswith(
        f"{PREFIX}app 'typo' did not start: {path}: no such stream file to replay"
    ), line
    assert not path.exists()


@pytest.mark.slow
def test_a_second_instance_of_a_durable_consumer_is_one_line_asking_to_stop_the_other(
    tmp_path: Path,
) -> None:
    path = stream_file(tmp_path / "orders.ss", 1)
    first = DurableStore(str(path), "billing", file_created_at_ms=1_700_000_000_000)
    try:
        line = the_one_line(run("durable", path))
    finally:
        first.close()
    assert "app 'durable' did not start: " in line
    assert "durable consumer 'billing' is already running" in line
    assert "stop the other one" in line


def test_a_bad_checksum_is_one_line_naming_the_offset_and_the_repair(tmp_path: Path) -> None:
    path = stream_file(tmp_path / "orders.ss", 3, payload=b"12345")
    data = bytearray(path.read_bytes())
    data[data.index(b"12345", data.index(b"12345") + 1)] ^= 0x01  # the second payload
    path.write_bytes(data)
    result = run("replay", path)
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    last = stderr_lines(result)[-1]
    assert last.startswith(f"{PREFIX}app 'replay' ")
    assert f"{path} at byte " in last and "checksum mismatch" in last
    assert last.endswith(f"`trio-streams file repair {path}` moves the unreadable part aside")


def test_a_failing_startup_hook_is_one_line_naming_the_hook_and_its_error() -> None:
    line = the_one_line(run("hooky"))
    assert line == (
        f"{PREFIX}app 'hooky' did not start: RuntimeError: database unreachable "
        "(in the on_startup hook connect_database); --log-level debug shows the traceback"
    )


def test_several_errors_are_listed_one_line_each() -> None:
    result = run("several")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert stderr_lines(result) == [
        f"{PREFIX}app 'several' did not start: 2 errors:",
        f"{PREFIX}  ConnectionRefusedError: server a refused; --log-level debug shows the "
        "traceback",
        f"{PREFIX}  ConnectionRefusedError: server b refused; --log-level debug shows the "
        "traceback",
    ]


def test_the_traceback_only_with_log_level_debug() -> None:
    result = run("hooky", None, "--log-level", "debug")
    assert result.returncode == 1
    assert "Traceback (most recent call last)" in result.stderr
    assert 'raise RuntimeError("database unreachable")' in result.stderr
    assert stderr_lines(result)[-1].startswith(f"{PREFIX}app 'hooky' did not start: ")


def test_app_run_prints_the_same_one_line_and_exits_1() -> None:
    result = run_command([sys.executable, "-c", "from tests.cli.apps import hooky; hooky.run()"])
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "hooky: app 'hooky' did not start: RuntimeError: database unreachable (in the "
        "on_startup hook connect_database); its traceback is logged at DEBUG"
    ]
