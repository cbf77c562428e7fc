"""The command line: ``trio-streams`` and its subcommands, one module each.

``main`` is the console script's entry point; each subcommand's module registers its parser and
runs it. Everything here is a front end over the library's public API and kits.
"""

from .commands import main

__all__ = ["main"]
