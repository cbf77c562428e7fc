"""Argument types the subcommands share, checked by the parser.

A value that cannot be right whatever the server or the file holds (a position that is not
one, a Redis URL that does not parse, a negative wait) is a bad command line: the parser refuses
it with one line and status 2, before anything is opened. Each type returns the text as given,
so the command reads it as before; only the check moves to the parser.
"""

from __future__ import annotations

import argparse
import difflib
import math
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

__all__ = [
    "CommandLineParser",
    "bad_command_line",
    "beacon_interval",
    "checked_by",
    "command_path",
    "error_line",
    "file_position",
    "guarded",
    "redis_url",
    "seconds",
    "set_command",
]

#: The command being run, as typed (``trio-streams file decode``): set once its arguments are
#: parsed, so every error line names it.
_command = ["trio-streams"]


def set_command(path: str) -> None:
    """Name the command being run (its full subcommand path) in the error lines that follow."""
    _command[0] = path


def command_path(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """``trio-streams file decode``: the parser's name and each subcommand ``args`` chose."""
    path = [parser.prog]
    while True:
        chosen = [
            (action, name)
            for action in parser._actions
            if isinstance(action, argparse._SubParsersAction)
            and isinstance(name := getattr(args, action.dest, None), str)
        ]
        if not chosen:
            return " ".join(path)
        action, name = chosen[0]
        parser = action.choices[name]
        path.append(name)


def error_line(message: str) -> str:
    """``trio-streams COMMAND: error: MESSAGE``: how every command's error line begins."""
    return f"{_command[0]}: error: {message}"


class CommandLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose refusal is one line on stderr, status 2: the command, what is
    wrong, and where the usage is (subcommands' parsers are of the same class)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` shows the usage)\n")

    def parse_known_args(  # type: ignore[override]
        self, args: Sequence[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """Parse as argparse does, but refuse what this parser does not know here, with its own
        name: a misspelled option of ``run`` is ``trio-streams run: error: ...`` with the
        closest option, not the top-level parser's refusal of every argument it was left."""
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(self._unrecognized(extras))
        return parsed, extras

    def _unrecognized(self, extras: list[str]) -> str:
        """``unrecognized arguments: ...``: the unknown options (their values left out), each
        with the closest option of this parser when one is close; every argument if none is
        an option."""
        options = [extra for extra in extras if extra.startswith("-") and extra != "-"]
        known = list(self._option_string_actions)
        named = []
        for option in options or extras:
            name = option.partition("=")[0]
            close = difflib.get_close_matches(name, known, n=1) if option in options else []
            shown = name if option in options else option
            named.append(f"{shown} (did you mean {close[0]}?)" if close else shown)
        return f"unrecognized arguments: {' '.join(named)}"


def bad_command_line(message: str) -> NoReturn:
    """Refuse arguments the parser cannot judge alone (options that do not go together, a
    value one check away from the parser): ``error: MESSAGE`` on stderr, status 2."""
    sys.stderr.write(error_line(message) + "\n")
    raise SystemExit(2)


def checked_by(check: Callable[[str], object], text: str) -> str:
    """``text`` once ``check`` took it; the ``ValueError`` it raises (trio-streams' own
    ``ConfigurationError`` is one) becomes the parser's refusal, its message as it is."""
    try:
        check(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def guarded(handler: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
    """``handler`` (a subcommand's, synchronous) with its errors as the command's status: a
    trio-streams error is one ``error:`` line, its notes and its hint below it, status 1; a
    ``ValueError`` is one line, status 2 (a bad value the parser could not judge)."""
    from ..core.errors import TrioStreamsError

    def run(args: argparse.Namespace) -> int:
        try:
            return int(handler(args))
        except TrioStreamsError as exc:
            sys.stdout.flush()
            sys.stderr.write(error_line(str(exc)) + "\n")
            notes = [str(note) for note in getattr(exc, "__notes__", ())]
            hint = exc.hint()
            if hint is not None and not any(hint in note for note in notes):
                notes.append(hint)
            for note in notes:
                sys.stderr.write(f"  {note}\n")
            return 1
        except ValueError as exc:
            sys.stderr.write(error_line(str(exc)) + "\n")
            return 2

    return run


def beacon_interval(text: str) -> int:
    """``--beacon-interval`` of a stream file it creates: bytes, within what the format
    allows."""
    from ..file.format import MIN_BEACON_INTERVAL

    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of bytes: {text!r}") from None
    if not MIN_BEACON_INTERVAL <= value < 1 << 32:
        raise argparse.ArgumentTypeError(
            f"must be {MIN_BEACON_INTERVAL}..2**32-1 bytes, not {value}"
        )
    return value


def file_position(text: str) -> str:
    """``--from`` of a stream file: ``beginning``, ``end``, ``seq:N`` or ``ts:MS``."""
    from ..file.positions import parse_position

    return checked_by(parse_position, text)


def redis_url(text: str) -> str:
    """A Redis URL that parses (scheme, hosts, port, database, options); whether the server
    is there is for the command to find out. The message never shows the password."""
    from ..redis.client import parse_url

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
