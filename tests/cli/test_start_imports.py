"""A command imports what it uses: ``--help`` nothing of the transports, ``publish`` to a file
the file's writer, ``file decode`` its reader. None of them imports Trio, the Redis client, the
app's runtime or an observability library.

How long a command takes to start is measured, not asserted (``benchmarks/cli_start.py``);
what it imports is structure, and checked here: each command runs in a real interpreter under
``python -X importtime``, whose report names every module imported, so an eager import added
back anywhere on a command's path fails the test that runs that command.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from trio_streams.cli.commands import COMMANDS, build_parser

from .support import run_command, stream_file

#: What none of these commands needs: the event loop and what is built on it, the transports
#: other than the file's reading and writing, the app's runtime, and the extras.
HEAVY = (
    "trio",
    "attr",
    "trio_streams.core.app",
    "trio_streams.core.dispatch",
    "trio_streams.core.transport",
    "trio_streams.memory",
    "trio_streams.redis",
    "trio_streams.running",
    "trio_streams.integrations",
    "trio_streams.record",
    "trio_streams.top",
    "trio_streams.file.broker",
    "trio_streams.file.follower",
    "opentelemetry",
    "prometheus_client",
    "rich",
    "hiredis",
    "msgspec",
)


def imported_by(*args: str) -> set[str]:
    """The modules ``trio-streams ARGS`` imports, from ``-X importtime``'s report (after
    checking the command succeeded, so an empty report cannot pass)."""
    result = run_command([sys.executable, "-X", "importtime", "-m", "trio_streams", *args])
    assert result.returncode == 0, result.stderr[-2000:]
    names = {
        line.rpartition("|")[2].strip()
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    assert "trio_streams.cli.commands" in names, result.stderr[-2000:]
    return names


def heavy_among(names: set[str]) -> list[str]:
    return sorted(n for n in names if any(n == h or n.startswith(h + ".") for h in HEAVY))


def test_help_imports_no_transport_no_command_and_not_trio() -> None:
    names = imported_by("--help")
    assert heavy_among(names) == []
    assert not [n for n in names if n.startswith(("trio_streams.file", "trio_streams.cli.parsers"))]


def test_a_commands_help_builds_its_own_parser_only() -> None:
    names = imported_by("publish", "--help")
    assert heavy_among(names) == []
    parsers = {n for n in names if n.startswith("trio_streams.cli.parsers.")}
    assert parsers == {"trio_streams.cli.parsers.publish"}
    assert "trio_streams.file.writer" not in names  # the handler is imported when it runs


def test_publish_to_a_file_imports_the_writer_and_not_trio(tmp_path: Path) -> None:
    names = imported_by("publish", str(tmp_path / "out.ss"), "orders", "hello")
    assert heavy_among(names) == []
    assert {"trio_streams.file.writer", "trio_streams.cli.publish_file"} <= names
    assert "trio_streams.cli.publish_redis" not in names
    assert "trio_streams.file.ndjson_input" not in names  # only --ndjson reads ndjson


def test_publish_ndjson_to_a_file_imports_the_ndjson_reader_and_not_trio(tmp_path: Path) -> None:
    source = tmp_path / "in.ndjson"
    source.write_text('{"stream_key": "orders", "payload": "hello", "encoding": "utf8"}\n')
    names = imported_by("publish", str(tmp_path / "out.ss"), "--ndjson", "--file", str(source))
    assert heavy_among(names) == []
    assert "trio_streams.file.ndjson_input" in names


@pytest.mark.parametrize("fmt", ["ndjson", "log"])
def test_file_decode_imports_the_reader_and_not_the_writer_or_trio(
    tmp_path: Path, fmt: str
) -> None:
    path = stream_file(tmp_path / "in.ss", 3)
    names = imported_by("file", "decode", "--format", fmt, str(path))
    assert heavy_among(names) == []
    assert "trio_streams.file.reader" in names
    assert "trio_streams.file.writer" not in names


def test_the_check_sees_a_command_that_imports_trio(tmp_path: Path) -> None:
    """The report is read right: ``file stat`` lists the file's consumer groups, whose state
    module runs on Trio, and is seen importing it."""
    path = stream_file(tmp_path / "in.ss", 3)
    assert "trio" in heavy_among(imported_by("file", "stat", str(path)))
    assert heavy_among({"triopoly", "trio_streams.redisx"}) == []


def _parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


def _helps(parser: argparse.ArgumentParser, command: str) -> dict[str, str]:
    """The help of the top-level parser and of ``command``'s parsers, by their prog."""
    return {
        p.prog: p.format_help()
        for p in _parsers(parser)
        if p.prog == "trio-streams" or p.prog.split()[1] == command
    }


@pytest.mark.parametrize("command", [command.name for command in COMMANDS])
def test_a_command_lines_parser_of_its_command_alone_is_the_whole_parsers(command: str) -> None:
    """``main`` builds only the parser of the command it runs: that parser, its subcommands'
    and the listing of every command are those of the parser with every command built."""
    alone = _helps(build_parser(only=command), command)
    assert len(alone) > 1
    assert alone == _helps(build_parser(), command)


def test_a_command_line_without_a_command_lists_every_command_as_the_whole_parser() -> None:
    assert build_parser(only="").format_help() == build_parser().format_help()
