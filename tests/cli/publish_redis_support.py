"""``trio-streams publish`` to Redis run in this process, and the servers it publishes to.

A command run here takes milliseconds where a subprocess takes most of a second: the tests of
what is published and what is refused run it here (its stdin, stdout and stderr swapped for
the call), and a subprocess only where the process is the point (a running app beside it,
Ctrl-C, an interpreter without hiredis).
"""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.redis_servers import RedisServer, redis_server
from trio_streams.cli.commands import main


@dataclass(frozen=True)
class Published:
    """What one command printed, and its exit status."""

    status: int
    out: str
    err: str

    @property
    def receipts(self) -> list[str]:
        return self.out.splitlines()

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def publish(*argv: str, stdin: bytes = b"") -> Published:
    """``trio-streams publish ARGV`` in this process, reading ``stdin``."""
    return command("publish", *argv, stdin=stdin)


def command(*argv: str, stdin: bytes = b"") -> Published:
    """``trio-streams ARGV`` in this process, reading ``stdin``."""
    streams = sys.stdin, sys.stdout, sys.stderr
    out, err = io.StringIO(), io.StringIO()
    sys.stdin = io.TextIOWrapper(io.BytesIO(stdin), encoding="utf-8")
    sys.stdout, sys.stderr = out, err
    try:
        status = main(list(argv))
    except SystemExit as exit_:  # as the interpreter ends the program: a text is said, status 1
        if isinstance(exit_.code, str):
            err.write(exit_.code + "\n")
        status = 1 if isinstance(exit_.code, str) else int(exit_.code or 0)
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
    return Published(status, out.getvalue(), err.getvalue())


@pytest.fixture
def server() -> Iterator[RedisServer]:
    """A fresh standalone server for one test."""
    with redis_server() as started:
        yield started


def entries(server: RedisServer, key: str) -> list[tuple[str, list[bytes]]]:
    """Every entry of stream ``key``: its id and its flat field list."""
    return [(i.decode(), list(f)) for i, f in server.command("XRANGE", key, "-", "+")]
