"""The ``trio-streams`` command line.

Subcommands are registered by the modules that own them, so the CLI stays one small dispatcher.
What every subcommand shares is here: Ctrl-C exits with status 130 and no traceback, and a
reader that went away (``trio-streams file decode big.ss | head``) ends the command quietly with
status 141, as the coreutils do (they die of SIGPIPE, which a shell reports as 128 + 13).
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from collections.abc import Callable, Sequence

from ._version import __version__
from .groups import leaves

__all__ = ["build_parser", "main"]

#: Functions that add a subcommand to the top-level parser; each owns its own module.
Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]

#: The exit status of a command stopped by Ctrl-C (128 + SIGINT).
EXIT_INTERRUPTED = 128 + signal.SIGINT
#: The exit status of a command whose output was closed early (128 + SIGPIPE).
EXIT_BROKEN_PIPE = 128 + signal.SIGPIPE


def _registrars() -> list[Registrar]:
    from . import cli_asyncapi, cli_publish, cli_run
    from .file.cli import register as register_file
    from .record.cli import register as register_record
    from .top.cli import register as register_top

    return [
        cli_run.register,
        cli_publish.register,
        register_file,
        register_record,
        register_top,
        cli_asyncapi.register,
    ]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-streams", description="Run, feed and inspect trio-streams services."
    )
    parser.add_argument("--version", action="version", version=f"trio-streams {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _registrars():
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        parser = build_parser()
        args = parser.parse_args(argv)
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
    except BaseExceptionGroup as group:  # the same, raised inside a command's nursery
        if all(isinstance(leaf, BrokenPipeError) for leaf in leaves(group)):
            _discard_stdout()
            return EXIT_BROKEN_PIPE
        if all(isinstance(leaf, KeyboardInterrupt) for leaf in leaves(group)):
            _discard_stdout()
            return EXIT_INTERRUPTED
        raise


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
