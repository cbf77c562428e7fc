"""What ``trio-streams run`` logs: a banner, one line per retry, and the formats it can take."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from .support import cli, stderr_lines, stream_file


def run_flaky(tmp_path: Path, *args: str, fails: int = 2) -> subprocess.CompletedProcess[str]:
    path = stream_file(tmp_path / "orders.ss", 1)
    return cli(
        "run",
        "tests.cli.apps:flaky",
        *args,
        env={"STREAM_FILE": str(path), "FAILS": str(fails)},
    )


def test_a_run_with_two_retries_logs_a_bounded_handful_of_lines_and_no_traceback(
    tmp_path: Path,
) -> None:
    result = run_flaky(tmp_path)
    assert result.returncode == 0, result.stderr
    lines = stderr_lines(result)
    assert len(lines) <= 8, result.stderr
    assert "Traceback" not in result.stderr
    warnings = [line for line in lines if " WARNING " in line]
    assert len(warnings) == 2, result.stderr
    for attempt, warning in enumerate(warnings, 1):
        assert f"charge: handler failed on attempt {attempt} of 5 " in warning
        assert warning.endswith(f"ValueError: payment gateway timed out (call {attempt})")
    assert not [line for line in lines if " ERROR " in line]


def test_the_startup_banner_names_the_app_its_brokers_and_its_subscriptions(
    tmp_path: Path,
) -> None:
    result = run_flaky(tmp_path, fails=0)
    info = [line for line in stderr_lines(result) if " INFO trio_streams.app.flaky: " in line]
    path = tmp_path / "orders.ss"
    assert info[0].endswith(f"flaky: running, 1 subscription(s) on file '{path}'")
    assert info[1].endswith(
        f"flaky: subscription 'charge' reads FileStream('orders').replay() on file '{path}', "
        "replaying from the beginning (workers=1, max_attempts=5, dead letter 'orders.dead')"
    )
    assert info[-1].endswith("flaky: stopped")


def test_retry_tracebacks_are_at_debug(tmp_path: Path) -> None:
    result = run_flaky(tmp_path, "--log-level", "debug")
    assert result.returncode == 0
    assert result.stderr.count("Traceback (most recent call last)") == 2
    assert "the traceback of attempt 1" in result.stderr


def test_the_last_attempt_is_an_error_with_its_traceback_then_the_dead_letter_says_why(
    tmp_path: Path,
) -> None:
    result = run_flaky(tmp_path, fails=5)
    assert result.returncode == 0, result.stderr
    errors = [line for line in stderr_lines(result) if " ERROR " in line]
    assert len(errors) == 1
    assert "charge: handler failed on attempt 5 of 5, the last " in errors[0]
    assert result.stderr.count("Traceback (most recent call last)") == 1
    assert "dead-lettered to 'orders.dead' after 5 attempt(s): max-attempts (ValueError: " in (
        result.stderr
    )


def test_log_format_json_is_one_object_per_line(tmp_path: Path) -> None:
    result = run_flaky(tmp_path, "--log-format", "json", fails=5)
    records = [json.loads(line) for line in stderr_lines(result)]
    assert all(set(r) <= {"time", "level", "logger", "message", "exc_info"} for r in records)
    assert all(r["time"].endswith("Z") and "T" in r["time"] for r in records)
    assert records[0]["level"] == "INFO" and records[0]["logger"] == "trio_streams.app.flaky"
    (last_attempt,) = [r for r in records if r["level"] == "ERROR"]
    assert last_attempt["exc_info"].startswith("Traceback (most recent call last)")
    assert "ValueError: payment gateway timed out (call 5)" in last_attempt["exc_info"]
    assert all("exc_info" not in r for r in records if r["level"] != "ERROR")


def test_a_startup_failure_is_still_one_plain_line_under_log_format_json() -> None:
    result = cli("run", "tests.cli.apps:hooky", "--log-format", "json")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        "trio-streams run: app 'hooky' did not start: RuntimeError: database unreachable (in "
        "the on_startup hook connect_database); --log-level debug shows the traceback"
    ]


def test_log_config_hands_a_json_file_to_dictconfig(tmp_path: Path) -> None:
    log_file = tmp_path / "app.log"
    config = tmp_path / "logging.json"
    config.write_text(
        json.dumps(
            {
                "version": 1,
                "formatters": {
                    "plain": {"format": "%(levelname)s|%(name)s|%(message)s"},
                    "json": {"()": "trio_streams.core.logs.JsonFormatter"},
                },
                "handlers": {
                    "file": {
                        "class": "logging.FileHandler",
                        "filename": str(log_file),
                        "formatter": "plain",
                    },
                    "errors": {
                        "class": "logging.StreamHandler",
                        "level": "ERROR",
                        "formatter": "json",
                    },
                },
                "root": {"level": "WARNING", "handlers": ["file", "errors"]},
            }
        )
    )
    result = run_flaky(tmp_path, "--log-config", str(config), fails=5)
    assert result.returncode == 0, result.stderr
    logged = log_file.read_text().splitlines()
    assert logged[0].startswith("WARNING|trio_streams.subscription.charge|charge: handler failed")
    assert not any(line.startswith("INFO|") for line in logged)  # the file set WARNING
    (error,) = [json.loads(line) for line in stderr_lines(result)]
    assert error["level"] == "ERROR"


def test_a_log_config_that_is_not_json_is_refused_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "logging.yaml"
    config.write_text("version: 1\n")
    result = cli("run", "tests.cli.apps:hooky", "--log-config", str(config))
    assert result.returncode == 2
    assert stderr_lines(result) == [
        f"trio-streams run: the log config {config} is not JSON (YAML is not supported: write "
        "it as JSON): line 1, column 1: Expecting value"
    ]


def test_a_log_config_dictconfig_refuses_is_refused_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "logging.json"
    config.write_text(json.dumps({"version": 1, "handlers": {"h": {"class": "no.such.Handler"}}}))
    result = cli("run", "tests.cli.apps:hooky", "--log-config", str(config))
    assert result.returncode == 2
    (line,) = stderr_lines(result)
    assert line.startswith(f"trio-streams run: the log config {config} is refused by dictConfig")


def test_a_missing_log_config_is_refused_naming_the_file(tmp_path: Path) -> None:
    config = tmp_path / "nowhere.json"
    result = cli("run", "tests.cli.apps:hooky", "--log-config", str(config))
    assert result.returncode == 2
    assert stderr_lines(result) == [
        f"trio-streams run: cannot read the log config {config}: No such file or directory"
    ]


def test_log_config_with_log_level_is_refused(tmp_path: Path) -> None:
    config = tmp_path / "logging.json"
    config.write_text('{"version": 1}')
    result = cli("run", "tests.cli.apps:hooky", "--log-config", str(config), "--log-level", "debug")
    assert result.returncode == 2
    assert "--log-config replaces --log-level and --log-format" in result.stderr


def test_under_workers_each_line_names_the_worker_or_the_supervisor_that_wrote_it(
    tmp_path: Path,
) -> None:
    result = run_flaky(tmp_path, "--workers", "2", "--allow-broadcast", fails=0)
    assert result.returncode == 0, result.stderr  # each worker replays the file to its end
    lines = stderr_lines(result)
    for index in (0, 1):
        assert any(
            f" INFO [worker {index}] trio_streams.app.flaky: flaky: running" in line
            for line in lines
        ), result.stderr
    supervisor = [line for line in lines if " trio_streams.supervisor: " in line]
    assert supervisor
    assert all(" [supervisor] trio_streams.supervisor: " in line for line in supervisor)
    assert all(" [worker " in line or " [supervisor] " in line for line in lines), result.stderr


@pytest.mark.slow
def test_under_workers_each_json_record_names_its_process(tmp_path: Path) -> None:
    result = run_flaky(
        tmp_path, "--workers", "2", "--allow-broadcast", "--log-format", "json", fails=0
    )
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in stderr_lines(result)]
    assert {r["process"] for r in records} == {"supervisor", "worker 0", "worker 1"}
    assert {r["process"] for r in records if r["logger"] == "trio_streams.supervisor"} == {
        "supervisor"
    }


def test_a_run_in_one_process_names_no_process(tmp_path: Path) -> None:
    result = run_flaky(tmp_path, fails=0)
    assert result.returncode == 0, result.stderr
    assert not any("[worker" in line or "[supervisor]" in line for line in stderr_lines(result))
