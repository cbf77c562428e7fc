"""Argument types the subcommands share, checked by the parser.

A value that cannot be right whatever the server or the file holds (a position that is not
one, a Redis URL that does not parse, a negative wait) is a bad command line: the parser refuses
it with one line and status 2, before anything is opened. Each type returns the text as given,
so the command reads it as before; only the check moves to the parser.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from typing import NoReturn

__all__ = [
    "CommandLineParser",
    "bad_command_line",
    "checked_by",
    "file_position",
    "redis_url",
    "seconds",
]


class CommandLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose refusal is one line on stderr, status 2: the command, what is
    wrong, and where the usage is (subcommands' parsers are of the same class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` shows the usage)\n")


def bad_command_line(message: str) -> NoReturn:
    """Refuse arguments the parser cannot judge alone (options that do not go together, a
    value one check away from the parser): ``error: MESSAGE`` on stderr, status 2."""
    sys.stderr.write(f"error: {message}\n")
    raise SystemExit(2)


def checked_by(check: Callable[[str], object], text: str) -> str:
    """``text`` once ``check`` took it; the ``ValueError`` it raises (trio-streams' own
    ``ConfigurationError`` is one) becomes the parser's refusal, its message as it is."""
    try:
        check(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def file_position(text: str) -> str:
    """``--from`` of a stream file: ``beginning``, ``end``, ``seq:N`` or ``ts:MS``."""
    from .file.positions import parse_position

    return checked_by(parse_position, text)


def redis_url(text: str) -> str:
    """A Redis URL that parses (scheme, hosts, port, database, options); whether the server
    is there is for the command to find out. The message never shows the password."""
    from .redis.client import parse_url

    return checked_by(parse_url, text)


def seconds(*, unbounded: bool = False) -> Callable[[str], float]:
    """A number of seconds >= 0; ``inf`` (no bound) only if ``unbounded``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if math.isnan(value) or value < 0 or (math.isinf(value) and not unbounded):
            raise argparse.ArgumentTypeError(f"must be >= 0 seconds, not {text}")
        return value

    return parse
