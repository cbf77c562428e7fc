"""Clean errors (one line on stderr, no traceback) and the right exit status, in real processes."""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.redis_servers import free_port
from trio_streams.core.extras import install_command

from .support import COMMAND, ROOT, cli, one_error_line, run_command, stderr_lines, stream_file

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
    assert stderr_lines(result) == [
        f"trio-streams file {command}: error: {tmp_path}: is a directory, not a stream file"
    ]


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


def test_a_factory_refused_for_a_missing_extra_is_a_usage_error_with_exit_2() -> None:
    result = cli("run", "tests.cli.apps:make_without_extra", "--factory")
    assert result.returncode == 2, result.stderr
    [line] = stderr_lines(result)
    assert line.startswith(
        "trio-streams run: --factory: calling tests.cli.apps:make_without_extra() failed: "
        "the app's endpoint needs the 'http' extra"
    ), line
    assert line.endswith(install_command("http")), line


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


def test_a_class_given_as_the_target_is_named_as_a_class_without_the_factory_hint() -> None:
    result = cli("run", "tests.cli.apps:Order")
    assert result.returncode == 2
    assert stderr_lines(result) == [
        "trio-streams run: tests.cli.apps:Order is the class Order, not a trio_streams.App: "
        "name the App instance (module:app)"
    ]


def test_a_json_array_line_given_to_file_write_names_the_line(tmp_path: Path) -> None:
    target = tmp_path / "out.ss"
    good = '{"stream_key": "orders", "seq": 1, "timestamp_ms": 1, "payload": "a"}'
    result = cli("file", "write", str(target), stdin=f"{good}\n[1, 2]\n")
    assert result.returncode == 1
    lines = stderr_lines(result)
    assert len(lines) == 1, lines
    assert lines[0].startswith(
        "trio-streams file write: error: line 2: a JSON object belongs here, one message a line"
    )
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
    from trio_streams.cli import commands as command_line

    def fail(args: argparse.Namespace) -> int:
        raise BaseExceptionGroup("from a nursery", [error])

    def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        commands.add_parser("fail").set_defaults(handler=fail)

    monkeypatch.setattr(command_line, "_registrars", lambda: [register])
    assert command_line.main(["fail"]) == status
    assert capsys.readouterr().err == ""


# ---- one rule for every command: a bad command line exits 2, a runtime error 1, each with one
# line on stderr (a hint may follow, indented) and never a traceback --------------------------

#: ``{tmp}`` is a fresh directory holding ``ok.ss`` (one message); ``{down}`` a Redis URL on a
#: loopback port nothing listens on.
MISTAKES: list[tuple[list[str], int, str]] = [
    # run
    (["run", "../x.py:app"], 2, "'../x.py' is a file path, not a module: give MODULE:ATTRIBUTE"),
    (["run", "processor.py:app"], 2, "drop the .py and give processor:app"),
    (["run", ".svc:app"], 2, "'.svc' is a relative module name"),
    (["run", "nosuchmodule:app"], 2, "cannot import 'nosuchmodule'"),
    (["run", "tests.cli.apps"], 2, "expected MODULE:ATTRIBUTE"),
    (["run", "tests.cli.apps:hooky", "--workers", "two"], 2, "argument --workers: not a whole"),
    (["run", "tests.cli.apps:hooky", "--crash-limit", "0"], 2, "argument --crash-limit: must"),
    (["run", "tests.cli.apps:hooky", "--http", "9100"], 2, "argument --http: expected HOST:PORT"),
    (["run", "tests.cli.apps:hooky", "--log-config", "{tmp}/no.json"], 2, "no.json"),
    (
        ["run", "tests.cli.apps:hooky", "--reload", "--reload-dir", "{tmp}/nodir"],
        2,
        "--reload-dir {tmp}/nodir: no such directory",
    ),
    # publish
    (["publish", "{tmp}/no/dir/f.ss", "k", "1"], 1, "{tmp}/no/dir/f.ss: cannot open for writing"),
    (["publish", "{tmp}/ok.ss", "k", "1", "-H", "novalue"], 2, "a header is NAME=VALUE"),
    (["publish", "{tmp}/ok.ss", "k", "--file", "{tmp}/no.json"], 1, "cannot read --file"),
    (["publish", "{tmp}/ok.ss", "bad key", "1"], 2, "stream key 'bad key' is not valid"),
    (["publish", "{tmp}/ok.ss"], 2, "KEY is needed"),
    (["publish", "{tmp}/ok.ss", "k", "1", "--file", "{tmp}/ok.ss"], 2, "not both"),
    (["publish", "{tmp}/ok.ss", "k", "1", "--ndjson"], 2, "--ndjson reads the messages"),
    (["publish", "{down}", "k", "1"], 1, "cannot publish to {down}: "),
    (["publish", "{down}/x", "k", "1"], 2, "argument TARGET: "),
    (["publish", "{down}", "k", "1", "--list", "--channel"], 2, "not allowed with argument"),
    (["publish", "{down}", "k", "1", "--beacon-interval", "4096"], 2, "--beacon-interval is"),
    (["publish", "{tmp}/ok.ss", "k", "1", "--channel"], 2, "--channel is for a Redis target"),
    (["publish", "{tmp}/ok.ss", "k", "--beacon-interval", "many"], 2, "not a number of bytes"),
    # asyncapi
    (["asyncapi", "tests.cli.asyncapi_apps:app", "-o", "{tmp}/no/dir/f"], 1, "cannot write"),
    (["asyncapi", "shop.py:app"], 2, "drop the .py and give shop:app"),
    # file
    (["file", "decode", "{tmp}/no.ss"], 1, "{tmp}/no.ss: no such stream file"),
    (["file", "decode", "{tmp}/ok.ss", "--from", "nonsense"], 2, "position 'nonsense' is not"),
    (["file", "decode", "{tmp}/ok.ss", "--format", "xml"], 2, "argument --format"),
    (["file", "decode", "{tmp}/ok.ss", "--from", "seq:1"], 2, "needs exactly one --key"),
    (["file", "tail", "{tmp}/no.ss"], 1, "{tmp}/no.ss: no such stream file"),
    (["file", "tail", "{tmp}/ok.ss", "--from", "seq:x"], 2, "position 'seq:x' is not"),
    (["file", "stat", "{tmp}/no.ss"], 1, "{tmp}/no.ss: no such stream file"),
    (["file", "write", "{tmp}/no/dir/f.ss"], 1, "cannot open for writing"),
    (["file", "write", "{tmp}/w.ss", "--created-at-ms", "soon"], 2, "--created-at-ms"),
    (["file", "repair", "{tmp}/no.ss", "--yes"], 1, "{tmp}/no.ss: cannot open"),
    (["file", "repair", "{tmp}/ok.ss", "--wait", "-1"], 2, "argument --wait: must be >= 0"),
    (["file", "repair", "{tmp}/ok.ss", "--wait", "long"], 2, "argument --wait: not a number"),
    (["file"], 2, "the following arguments are required"),
    # record
    (["record", "{down}", "s", "--to", "{tmp}/r.ss", "--from", "garbage"], 2, "--from 'garbage'"),
    (["record", "{down}", "s", "--to", "{tmp}/r.ss", "--until", "later"], 2, "--until 'later'"),
    (["record", "{down}", "s", "--to", "{tmp}/r.ss", "--limit", "x"], 2, "argument --limit"),
    (["record", "{down}", "s", "--to", "{tmp}/r.ss", "--from", "end"], 2, "add --follow"),
    (["record", "{down}", "s", "--to", "{tmp}/r.ss", "--from", "5", "--channel"], 2, "no past"),
    (["record", "localhost:6379", "s", "--to", "{tmp}/r.ss"], 2, "Redis URL 'localhost:6379'"),
    (["record", "redis://h:port", "s", "--to", "{tmp}/r.ss"], 2, "bad port 'port'"),
    (["record", "{down}", "s", "--to", "{tmp}/r.ss"], 1, "cannot connect"),
    # replay
    (["replay", "{tmp}/ok.ss", "--to", "{down}", "--from", "nonsense"], 2, "position 'nonsense'"),
    (["replay", "{tmp}/ok.ss", "--to", "nowhere"], 2, "Redis URL 'nowhere' must start with"),
    (["replay", "{tmp}/ok.ss", "--to", "{down}", "--rate", "fast"], 2, "argument --rate"),
    (["replay", "{tmp}/ok.ss", "--to", "{down}", "--as", "queue"], 2, "argument --as"),
    (["replay", "{tmp}/no.ss", "--to", "{down}"], 1, "{tmp}/no.ss: no such stream file"),
    (["replay", "{tmp}/ok.ss", "--to", "{down}"], 1, "cannot connect"),
    # top
    (["top", "{down}", "--once", "--interval", "0.01"], 1, "cannot connect"),
    (["top", "redis://h:99999", "--once"], 2, "bad port '99999'"),
    (["top", "{tmp}/no.ss", "--once"], 1, "{tmp}/no.ss: no such stream file"),
    (["top", "localhost:1", "--once"], 1, "file (a Redis URL starts with redis://)"),
    (["top", "[::1]:1", "--once"], 1, "file (a Redis URL starts with redis://)"),
    (["top", "{tmp}/ok.ss", "--once", "--interval", "soon"], 2, "argument --interval"),
    (["top", "{tmp}/ok.ss", "--once", "--sort", "size"], 2, "argument --sort"),
    # group
    (["group", "set-position", "{down}", "s", "g", "seq:3"], 2, "a sequence number cannot"),
    (["group", "set-position", "{down}", "s", "g", "soon"], 2, "position 'soon' is not"),
    (["group", "set-position", "{down}", "s", "g", "1-x"], 2, "entry id '1-x' is not"),
    (["group", "set-position", "nowhere", "s", "g", "end"], 2, "Redis URL 'nowhere' must"),
    (["group", "set-position", "{down}", "s", "g", "end"], 1, "cannot connect"),
    (["group", "set-position", "{down}", "s", "g"], 2, "the following arguments are required"),
    (["group"], 2, "the following arguments are required: ACTION"),
    # the command itself
    (["nosuchcommand"], 2, "argument COMMAND: invalid choice: 'nosuchcommand'"),
]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("argv", "status", "says"), MISTAKES, ids=[" ".join(argv) for argv, _, _ in MISTAKES]
)
def test_every_command_refuses_a_mistake_with_one_line_and_the_rules_status(
    tmp_path: Path, argv: list[str], status: int, says: str
) -> None:
    stream_file(tmp_path / "ok.ss", 1)
    down = f"redis://127.0.0.1:{free_port()}"

    def filled(text: str) -> str:
        return text.replace("{tmp}", str(tmp_path)).replace("{down}", down)

    result = cli(*map(filled, argv), stdin="")
    assert "Traceback" not in result.stderr, result.stderr
    errors = [line for line in stderr_lines(result) if not line.startswith(" ")]
    assert len(errors) == 1, result.stderr
    assert filled(says) in errors[0], result.stderr
    assert errors[0].startswith(f"{command_named(argv)}: "), result.stderr
    assert result.returncode == status, result.stderr


def command_named(argv: list[str]) -> str:
    """The command an error line of ``trio-streams ARGV`` names: its full subcommand path."""
    if argv[0] == "nosuchcommand":
        return "trio-streams"
    path = argv[:2] if argv[0] in ("file", "group") and len(argv) > 1 else argv[:1]
    return " ".join(["trio-streams", *path])


def test_an_error_writing_decoded_output_names_file_decode(tmp_path: Path) -> None:
    stream_file(tmp_path / "big.ss", 3)
    with open("/dev/full", "w") as full:
        result = subprocess.run(
            [*COMMAND, "file", "decode", str(tmp_path / "big.ss")],
            stdout=full, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 1, result.stderr
    [error] = [line for line in result.stderr.splitlines() if not line.startswith(" ")]
    assert error.startswith("trio-streams file decode: error: "), result.stderr


def test_a_path_given_to_run_says_what_to_write_instead() -> None:
    result = cli("run", "../billing/main.py:app")
    assert result.returncode == 2
    assert stderr_lines(result) == [
        "trio-streams run: '../billing/main.py' is a file path, not a module: give "
        "MODULE:ATTRIBUTE (main:app run from the directory holding it (cd ../billing) or with "
        "../billing on PYTHONPATH)"
    ]


def test_a_path_below_here_given_to_run_also_offers_its_dotted_module_name() -> None:
    result = cli("run", "tests/cli/apps.py:hooky")
    assert result.returncode == 2
    assert stderr_lines(result) == [
        "trio-streams run: 'tests/cli/apps.py' is a file path, not a module: give "
        "MODULE:ATTRIBUTE (tests.cli.apps:hooky if tests/cli is a package here, or apps:hooky "
        "run from the directory holding it (cd tests/cli) or with tests/cli on PYTHONPATH)"
    ]


def test_a_usage_error_is_one_line_naming_the_command_and_where_its_usage_is() -> None:
    result = cli("file", "decode", "x.ss", "--from", "nonsense")
    assert result.returncode == 2
    assert stderr_lines(result) == [
        "trio-streams file decode: error: argument --from: position 'nonsense' is not "
        "beginning, end, seq:N or ts:MS (`trio-streams file decode --help` shows the usage)"
    ]


def test_run_with_http_on_a_taken_port_is_refused_before_the_app_starts(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = cli("run", "tests.cli.apps:hooky", "--http", f"127.0.0.1:{port}")
    assert result.returncode == 1
    assert stderr_lines(result) == [
        f"trio-streams run: --http 127.0.0.1:{port}: cannot listen there: Address already in use"
    ]
    # hooky's startup hook fails: had the app started, its failure would show.
    assert "database unreachable" not in result.stderr


def test_an_error_no_command_expected_is_one_line_with_status_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from trio_streams.cli import commands as command_line

    def fail(args: argparse.Namespace) -> int:
        raise BaseExceptionGroup("from a nursery", [LookupError("no such thing")])

    def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        commands.add_parser("fail").set_defaults(handler=fail)

    monkeypatch.setattr(command_line, "_registrars", lambda: [register])
    assert command_line.main(["fail"]) == 1
    assert capsys.readouterr().err == "trio-streams fail: error: LookupError: no such thing\n"


@pytest.mark.parametrize(
    "address", ["http://127.0.0.1:abc", "http://127.0.0.1", "http://127.0.0.1:9/metrics"]
)
def test_top_of_an_app_address_that_is_not_host_and_port_is_a_bad_command_line(
    address: str,
) -> None:
    result = cli("top", address, "--once")
    line = one_error_line(result, 2, "trio-streams top: error: argument URL|FILE: ")
    assert line.startswith(
        "trio-streams top: error: argument URL|FILE: expected http://HOST:PORT (the address "
        f"an app's --http listens on, with no path), got {address!r}"
    ), line


@pytest.mark.parametrize("url", ["https://127.0.0.1:9", "ftp://127.0.0.1/x", "unix:///tmp/s"])
def test_top_of_a_url_of_another_scheme_says_the_scheme_is_not_supported(url: str) -> None:
    result = cli("top", url, "--once")
    line = one_error_line(result, 2, "trio-streams top: error: argument URL|FILE: ")
    scheme = url.partition("://")[0]
    assert f"{scheme}:// is not supported" in line and "no such stream file" not in line


def test_top_of_an_app_that_is_not_there_is_still_a_runtime_error() -> None:
    result = cli("top", f"http://127.0.0.1:{free_port()}", "--once", "--interval", "0.01")
    assert result.returncode == 1
    assert stderr_lines(result)[0].startswith(
        "trio-streams top: error: cannot read http://127.0.0.1:"
    )


@pytest.mark.parametrize(
    ("argv", "prog", "shown"),
    [
        (["run", "tests.cli.apps:hooky", "--wrkers", "2"], "trio-streams run",
         "--wrkers (did you mean --workers?)"),
        (["top", "x.ss", "--onse"], "trio-streams top", "--onse (did you mean --once?)"),
        (["file", "repair", "x.ss", "--dryrun"], "trio-streams file repair",
         "--dryrun (did you mean --dry-run?)"),
        (["publish", "x.ss", "k", "{}", "--zzzzzz=1"], "trio-streams publish", "--zzzzzz"),
        (["file", "stat", "x.ss", "extra"], "trio-streams file stat", "extra"),
    ],
)  # fmt: skip
def test_an_unrecognized_argument_is_reported_by_its_subcommand_with_the_closest_option(
    argv: list[str], prog: str, shown: str
) -> None:
    result = cli(*argv)
    line = one_error_line(result, 2, f"{prog}: error: unrecognized arguments: {shown}")
    assert line.endswith(f"(`{prog} --help` shows the usage)"), line


def test_python_m_trio_streams_is_the_command() -> None:
    result = run_command([sys.executable, "-m", "trio_streams", "--version"])
    assert result.returncode == 0, result.stderr
    assert result.stdout == cli("--version").stdout


def test_python_m_trio_streams_exits_2_on_a_bad_command_line_as_the_command_does() -> None:
    result = run_command([sys.executable, "-m", "trio_streams", "nosuchcommand"])
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
