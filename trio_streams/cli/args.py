"""The subcommands' argument types and the parser that refuses a bad command line.

A value that cannot be right whatever the server or the file holds (a position that is not
one, a Redis URL that does not parse, a negative wait) is a bad command line: the parser refuses
it with one line and status 2, before anything is opened. A type that only checks returns the
text as given, so the command reads it as before; only the check moves to the parser. Every
``type=`` of the subcommands is here, so the rules a value meets are read in one place; what a
type needs of the transports is imported when it runs, so building the parser stays cheap.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from ..core.errors import TrioStreamsError

__all__ = [
    "REDIS_SCHEMES",
    "URL_SCHEME",
    "CommandLineParser",
    "app_address",
    "at_least_one",
    "bad_command_line",
    "beacon_interval",
    "checked_by",
    "command_path",
    "deferred",
    "error_line",
    "error_notes",
    "file_group",
    "file_position",
    "group_position",
    "guarded",
    "header",
    "http_address",
    "note_line",
    "plain_help",
    "positive",
    "publish_target",
    "record_bound",
    "redis_url",
    "seconds",
    "set_command",
    "stream_key",
    "top_target",
]

#: How a Redis URL begins (``redis+cluster://``, ``rediss+sentinel://`` included).
REDIS_SCHEMES = ("redis://", "rediss://", "redis+", "rediss+")
#: A URL's scheme (``redis`` of ``redis://...``): a target that has one is not a file path.
URL_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")

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


def note_line(message: str, *, label: str = "note") -> str:
    """``trio-streams COMMAND: note: MESSAGE``: what a command says on stderr of something the
    user may not expect (a message nobody received), and goes on (``label="warning"``: of
    something that may need looking at)."""
    return f"{_command[0]}: {label}: {message}"


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
        import difflib  # here: only a refused command line needs it

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


#: A docstring's reST markup: ``literal`` and :role:`target`.
_RST_LITERAL = re.compile(r"``(.+?)``", re.DOTALL)
_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain_help(doc: str | None, paragraph: int = 1) -> str | None:
    """A paragraph of a command module's docstring as its ``--help`` text: plain, without the
    docstring's reST markup (a terminal shows it verbatim)."""
    if not doc:
        return None
    text = doc.split("\n\n")[paragraph]
    return _RST_ROLE.sub(r"\1", _RST_LITERAL.sub(r"\1", text))


def error_notes(exc: TrioStreamsError) -> list[str]:
    """The lines under an error's ``error:`` line: its notes, then its hint unless the
    message or a note says it already (an error that gives its own advice, such as
    :class:`~trio_streams.core.errors.WrongKeyType`, says it once)."""
    notes = [str(note) for note in getattr(exc, "__notes__", ())]
    hint = exc.hint()
    if hint is not None and hint not in str(exc) and not any(hint in note for note in notes):
        notes.append(hint)
    return notes


def guarded(handler: Callable[[argparse.Namespace], Any]) -> Callable[[argparse.Namespace], int]:
    """``handler`` (a subcommand's, synchronous) with its errors as the command's status: a
    trio-streams error is one ``error:`` line, its notes and its hint below it, status 1; a
    ``ValueError`` is one line, status 2 (a bad value the parser could not judge)."""

    def run(args: argparse.Namespace) -> int:
        from ..core.errors import TrioStreamsError  # when the command runs, not when parsed

        try:
            return int(handler(args))
        except TrioStreamsError as exc:
            sys.stdout.flush()
            sys.stderr.write(error_line(str(exc)) + "\n")
            for note in error_notes(exc):
                sys.stderr.write(f"  {note}\n")
            return 1
        except ValueError as exc:
            sys.stderr.write(error_line(str(exc)) + "\n")
            return 2

    return run


def deferred(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The handler ``name`` of ``module`` (``trio_streams.cli.file_stat``), imported when the
    command runs: a parser names its handler without importing it, so building the parser, and
    ``--help``, import nothing of the transports, and each command imports only what it uses."""

    def run(args: argparse.Namespace) -> int:
        # __import__, not importlib.import_module: python -X importtime reports what it imports
        handler: Callable[[argparse.Namespace], Any] = getattr(
            __import__(module, fromlist=[name]), name
        )
        return int(handler(args))

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


def file_group(text: str) -> str:
    """``GROUP`` of a stream file: a name a group's directory can have."""
    from ..file.group_store import check_group_name

    return checked_by(check_group_name, text)


def parse_group_position(text: str) -> Any:
    """The :class:`~trio_streams.core.positions.Position` a consumer group is moved to:
    ``beginning``, ``end``, an entry id ``<ms>-<seq>`` (that entry delivered next) or
    ``ts:MS`` (the first entry strictly later). ``seq:N`` is refused, saying why."""
    from ..core.positions import Position

    if text in ("beginning", "end"):
        return Position.beginning() if text == "beginning" else Position.end()
    kind, sep, number = text.partition(":")
    if sep and kind == "seq":
        from ..redis.streams import SEQUENCE_REFUSAL

        raise ValueError(f"position {text!r}: a sequence number {SEQUENCE_REFUSAL}")
    if sep and kind == "ts" and number.isdigit():
        return Position.timestamp(int(number))
    if not sep and "-" in text:
        return Position.entry(text)  # InvalidPosition (a ValueError) names what is wrong
    raise ValueError(f"position {text!r} is not beginning, end, an entry id <ms>-<seq> or ts:MS")


def group_position(text: str) -> str:
    """``POSITION`` of ``group set-position`` (see :func:`parse_group_position`)."""
    return checked_by(parse_group_position, text)


def redis_url(text: str) -> str:
    """A Redis URL that parses (scheme, hosts, port, database, options); whether the server
    is there is for the command to find out. The message never shows the password."""
    from ..redis.client import parse_url

    return checked_by(parse_url, text)


def seconds(*, minimum: float = 0, unbounded: bool = False) -> Callable[[str], float]:
    """A number of seconds >= ``minimum``; ``inf`` (no bound) only if ``unbounded``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
        if math.isnan(value) or value < minimum or (math.isinf(value) and not unbounded):
            raise argparse.ArgumentTypeError(f"must be >= {minimum} seconds, not {text}")
        return value

    return parse


def positive(kind: type[Any]) -> Callable[[str], Any]:
    """A finite number > 0 of ``kind`` (``int`` or ``float``): a rate, a speed, a limit."""

    def parse(value: str) -> Any:
        try:
            number = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
        if not (number > 0 and math.isfinite(number)):
            raise argparse.ArgumentTypeError(f"must be > 0, not {value}")
        return number

    return parse


def at_least_one(text: str) -> int:
    """A whole number >= 1: a count of processes or of restarts."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, not {value}")
    return value


def stream_key(text: str) -> str:
    """A stream key the file format can hold, that a subscription can name."""
    from ..file.sources import check_stream_key

    return checked_by(check_stream_key, text)


def header(text: str) -> tuple[str, str]:
    """``NAME=VALUE``, a header of the messages published (the value may be empty)."""
    name, sep, value = text.partition("=")
    if not sep or not name:
        raise argparse.ArgumentTypeError(f"a header is NAME=VALUE, not {text!r}")
    return name, value


def record_bound(option: str) -> Callable[[str], str]:
    """``--from`` / ``--until`` of ``record``: an entry id, ``ts:MS`` (or ``end`` for
    ``--from``), checked by the parser; the text is kept for ``parse_bounds``."""

    def check(value: str) -> object:
        from ..record.bounds import parse_bounds

        return parse_bounds(value, None) if option == "--from" else parse_bounds(None, value)

    return lambda value: checked_by(check, value)


def http_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``) that ``run --http`` listens on."""
    from ..running.http_endpoints import parse_address

    try:
        return parse_address(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def top_target(text: str) -> str:
    """What ``top`` watches. A Redis URL and an app's ``http://HOST:PORT`` are checked by the
    parser (a bad one, or a URL of another scheme, is a bad command line); a file is looked at
    when the view starts."""
    if text.startswith(REDIS_SCHEMES):
        return redis_url(text)
    if text.startswith("http://"):
        return app_address(text)
    scheme = URL_SCHEME.match(text)
    if scheme is not None:
        from ..redis.client import redact_url

        raise argparse.ArgumentTypeError(
            f"{scheme.group(1)}:// is not supported: top reads a Redis URL (redis://, "
            "rediss://, redis+cluster://, redis+sentinel://), a stream file, or the "
            f"http://HOST:PORT of an app's --http; got {redact_url(text)!r}"
        )
    return text


def publish_target(text: str) -> str:
    """What ``publish`` writes to. A Redis URL is checked by the parser (a bad one, or a URL of
    another scheme, is a bad command line); anything else is a stream file's path."""
    if text.startswith(REDIS_SCHEMES):
        return redis_url(text)
    scheme = URL_SCHEME.match(text)
    if scheme is not None:
        from ..redis.client import redact_url

        raise argparse.ArgumentTypeError(
            f"{scheme.group(1)}:// is not supported: publish writes to a stream file or a Redis "
            f"URL (redis://, rediss://, redis+cluster://, redis+sentinel://); got "
            f"{redact_url(text)!r}"
        )
    return text


def app_address(text: str) -> str:
    """``http://HOST:PORT`` of an app's ``--http``, with nothing after the port: top reads
    ``/metrics`` and ``/readyz`` itself."""
    address = text.removeprefix("http://").removesuffix("/")
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in address or "@" in host:
        from ..redis.client import redact_url

        raise argparse.ArgumentTypeError(
            f"expected http://HOST:PORT (the address an app's --http listens on, with no "
            f"path), got {redact_url(text)!r}"
        )
    return text
