"""The ``trio-streams`` command line.

Each command is listed here (:data:`COMMANDS`) and its parser built by its module of
:mod:`.parsers`, so the CLI stays one small dispatcher; a command line builds the parser of its
own command only, and imports the code of its handler only when it runs: ``--help`` imports none
of the transports, ``publish`` to a file the file's writer, ``file decode`` the reader. What
every subcommand shares is here: Ctrl-C exits with status 130 and no traceback, and a
reader that went away (``trio-streams file decode big.ss | head``) ends the command quietly with
status 141, as the coreutils do (they die of SIGPIPE, which a shell reports as 128 + 13).

``run`` is a service: SIGINT and SIGTERM stop it at any moment, also while trio-streams and
the app are still being imported. So this module imports nothing heavy at its top: ``main``
installs the start-up signal guard (``core.signal_guard``) first, then imports the rest.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from collections.abc import Callable, Sequence

from .._version import __version__
from ..core import signal_guard

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing

if TYPE_CHECKING:
    import argparse

__all__ = ["COMMANDS", "Command", "build_parser", "main"]

#: Functions that add a subcommand to the top-level parser; each owns its own module.
Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

#: The exit status of a command stopped by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: The exit status of a command that cannot run as given: a bad command line, or a feature
#: whose extra is not installed.
EXIT_USAGE = 2
#: The exit status of a command whose output was closed early (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


class Command:
    """A command of ``trio-streams``: its name, its line in ``trio-streams --help``, and the
    module of :mod:`.parsers` whose ``register`` gives its parser the rest (its description,
    arguments and handler), imported only when that parser is built. (A plain class: a
    dataclass would import ``inspect``, a cost every command would pay at start.)"""

    __slots__ = ("help", "name", "parser_module")

    def __init__(self, name: str, help: str, parser_module: str) -> None:
        self.name = name
        self.help = help
        self.parser_module = parser_module

    def __repr__(self) -> str:
        return f"Command({self.name!r}, {self.help!r}, {self.parser_module!r})"

    def __call__(self, commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
        """Add this command to ``commands`` with all its arguments."""
        parser = self.listed(commands)
        # __import__, not importlib.import_module: python -X importtime reports what it imports
        module = __import__(f"{__package__}.parsers.{self.parser_module}", fromlist=["register"])
        module.register(parser)

    def listed(
        self, commands: argparse._SubParsersAction[argparse.ArgumentParser]
    ) -> argparse.ArgumentParser:
        """Add this command to ``commands`` as ``--help`` lists it, without its arguments."""
        return commands.add_parser(self.name, help=self.help)


#: The commands, in the order ``trio-streams --help`` lists them.
COMMANDS = (
    Command("run", "run an app until SIGINT/SIGTERM", "run"),
    Command(
        "publish",
        "publish messages to a stream file (while apps write it too) or to Redis",
        "publish",
    ),
    Command("file", "inspect and write SeaStreamer stream files (.ss)", "file"),
    Command("record", "copy a Redis stream, list or channel into a stream file", "record"),
    Command("replay", "publish a recording back to Redis", "replay"),
    Command(
        "top",
        "a live view of a Redis deployment's streams, a stream file, or a running app",
        "top",
    ),
    Command("group", "manage Redis consumer groups (set-position)", "group"),
    Command("asyncapi", "write an app's AsyncAPI 3.0 document (JSON)", "asyncapi"),
)


def _registrars() -> list[Registrar]:
    return list(COMMANDS)


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The ``trio-streams`` parser. Every command is listed; with ``only``, only the command of
    that name gets its arguments (none does if no command has it), so running one command
    builds, and imports, the parser of that command alone: ``main`` passes the command line's
    command."""
    from typing import cast

    from .args import CommandLineParser

    parser = CommandLineParser(
        prog="trio-streams", description="Run, feed and inspect trio-streams services."
    )
    parser.add_argument("--version", action="version", version=f"trio-streams {__version__}")
    # Every subcommand's parser is a CommandLineParser too (argparse makes them of the
    # parent's class); the registrars need only what an ArgumentParser offers.
    commands = cast(
        "argparse._SubParsersAction[argparse.ArgumentParser]",
        parser.add_subparsers(dest="command", metavar="COMMAND"),
    )
    for register in _registrars():
        if isinstance(register, Command) and only is not None and register.name != only:
            register.listed(commands)
        else:
            register(commands)
    return parser


def _named_command(argv: list[str]) -> str:
    """The command ``argv`` runs: its first argument that is not an option (the top-level
    parser has only options that take no value), or "" if there is none."""
    return next((argument for argument in argv if not argument.startswith("-")), "")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command ``argv`` (the program's arguments when None) and return its status.

    For ``run``, SIGINT and SIGTERM are guarded from here on (see ``core.signal_guard``): one that
    comes before the app is running stops the command at once with one line and status 130. Called
    with ``argv`` (from code), the handlers found are put back on return; as the program, the
    guard stays until the process exits, so a signal at the very end changes nothing."""
    arguments = sys.argv[1:] if argv is None else list(argv)
    guarded = arguments[:1] == ["run"] and signal_guard.install(raising=True)
    try:
        return _main(arguments)
    except signal_guard.StopSignal as stop:
        # Before ``run`` configured logging: the one line goes to stderr as it is.
        print(
            f"trio-streams run: {stop.name} received while starting, stopping at once",
            file=sys.stderr,
        )
        return EXIT_INTERRUPTED
    finally:
        if guarded and argv is not None:
            signal_guard.uninstall()
        elif guarded:
            signal_guard.install(raising=False)


def _main(argv: list[str]) -> int:
    from .args import command_path, set_command

    command = "trio-streams"
    set_command(command)  # until the arguments say which command this is
    try:
        parser = build_parser(only=_named_command(argv))
        args = parser.parse_args(argv)
        command = command_path(parser, args)
        set_command(command)
        handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
        if handler is None:
            parser.print_help()
            return 2
        code = handler(args)
        sys.stdout.flush()  # a closed pipe shows here rather than at the interpreter's exit
        return code
    except BrokenPipeError:
        _discard_stdout()
        return EXIT_BROKEN_PIPE
    except KeyboardInterrupt:
        _discard_stdout()  # output still buffered for a reader that may be gone
        return EXIT_INTERRUPTED
    except BaseExceptionGroup as group:  # raised inside a command's nursery
        from ..core.extras import MissingExtra
        from ..core.groups import leaves

        if all(isinstance(leaf, BrokenPipeError) for leaf in leaves(group)):
            _discard_stdout()
            return EXIT_BROKEN_PIPE
        if all(isinstance(leaf, KeyboardInterrupt) for leaf in leaves(group)):
            _discard_stdout()
            return EXIT_INTERRUPTED
        found = leaves(group)
        if all(isinstance(leaf, MissingExtra) for leaf in found):
            print(f"{command}: {found[0]}", file=sys.stderr)
            return EXIT_USAGE
        if not all(isinstance(leaf, Exception) for leaf in leaves(group)):
            raise
        return _unexpected(command, group, "; ".join(map(_described, leaves(group))))
    except Exception as error:  # noqa: BLE001 - the last resort: one line, not a traceback
        from ..core.extras import MissingExtra  # here: a command that runs does not pay for it

        if isinstance(error, MissingExtra):  # the command needs an extra: one line, as usage
            print(f"{command}: {error}", file=sys.stderr)
            return EXIT_USAGE
        return _unexpected(command, error, _described(error))


def _described(error: BaseException) -> str:
    from ..core.reporting import describe

    return describe(error)


def _unexpected(command: str, error: BaseException, text: str) -> int:
    """An error no command turned into its own line: still one line and status 1, never a
    traceback on stderr (it is logged at DEBUG, which ``run --log-level debug`` shows)."""
    import logging

    logging.getLogger("trio_streams.cli").debug("%s: the traceback", command, exc_info=error)
    with contextlib.suppress(OSError, ValueError):
        sys.stdout.flush()  # what the command printed comes before the error
    print(f"{command}: error: {text}", file=sys.stderr)
    return 1


def _discard_stdout() -> None:
    """Point stdout at /dev/null, so flushing it at the interpreter's exit neither fails
    ("Exception ignored ... BrokenPipeError") nor blocks on a pipe nobody reads."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass  # stdout is not a real file (captured in tests): nothing will flush to a pipe


if __name__ == "__main__":
    sys.exit(main())
