"""The ``trio-streams`` command line.

Subcommands are registered by the modules that own them, so the CLI stays one small dispatcher.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from ._version import __version__

#: Functions that add a subcommand to the top-level parser; each owns its own module.
Registrar = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


def _registrars() -> list[Registrar]:
    from . import cli_run
    from .file.cli import register as register_file

    return [cli_run.register, register_file]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="trio-streams", description="Run and inspect trio-streams services."
    )
    parser.add_argument("--version", action="version", version=f"trio-streams {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _registrars():
        register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    handler: Callable[[argparse.Namespace], int] | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return handler(args)


if __name__ == "__main__":
    sys.exit(main())
