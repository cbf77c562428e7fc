"""``trio-streams run module:app``: import an app and run it until a signal stops it."""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import signal
import sys
from typing import Any

from .app import App, AppFailed

__all__ = ["load_app", "register"]


class AppNotFound(Exception):
    """The ``module:attribute`` given on the command line does not name an App."""


def load_app(target: str, *, factory: bool = False) -> App:
    """Import ``module:attribute`` (the current directory is importable) and return the App."""
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        raise AppNotFound(f"expected MODULE:ATTRIBUTE (e.g. myservice.main:app), got {target!r}")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise AppNotFound(f"cannot import {module_name!r}: {exc}") from exc
    value: Any = module
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise AppNotFound(f"{module_name!r} has no attribute {attribute!r}") from None
    if factory:
        value = value()
    if not isinstance(value, App):
        raise AppNotFound(f"{target} is {type(value).__name__}, not a trio_streams.App")
    return value


def _run(args: argparse.Namespace) -> int:
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        app = load_app(args.app, factory=args.factory)
    except AppNotFound as exc:
        print(f"trio-streams run: {exc}", file=sys.stderr)
        return 2
    try:
        graceful = app.run(shutdown_timeout=args.shutdown_timeout)
    except AppFailed as exc:
        print(f"trio-streams run: {exc}", file=sys.stderr)
        return 1
    return 0 if graceful else 128 + signal.SIGINT


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "run",
        help="run an app until SIGINT/SIGTERM",
        description="Import MODULE:ATTRIBUTE and run the App it names. The first SIGINT or "
        "SIGTERM drains in-flight work; a second one cancels at once.",
    )
    parser.add_argument("app", metavar="MODULE:ATTRIBUTE", help="where the App is, e.g. svc:app")
    parser.add_argument(
        "--factory", action="store_true", help="ATTRIBUTE is a function that returns the App"
    )
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long a graceful shutdown may drain before cancelling (default: the app's)",
    )
    parser.add_argument("--log-level", default="info", help="logging level (default: info)")
    parser.set_defaults(handler=_run)
