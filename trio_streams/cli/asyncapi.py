"""``trio-streams asyncapi MODULE:ATTRIBUTE``: write an app's AsyncAPI 3.0 document."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.errors import ConfigurationError
from ..integrations.asyncapi import asyncapi_document
from .run import AppImportFailed, AppNotFound, load_app

__all__ = ["register"]

_PROG = "trio-streams asyncapi"


def _asyncapi(args: argparse.Namespace) -> int:
    try:
        app = load_app(args.app, factory=args.factory)
    except AppNotFound as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return 2
    except AppImportFailed as exc:  # the module's own code raised: a runtime error
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return 1
    try:
        document = asyncapi_document(app, version=args.app_version, description=args.description)
    except ConfigurationError as exc:  # e.g. a publisher whose router is in no broker
        print(f"{_PROG}: {args.app}: {exc}", file=sys.stderr)
        return 2
    text = json.dumps(document, indent=2, sort_keys=False) + "\n"
    if args.output is None:
        sys.stdout.write(text)
        return 0
    try:
        Path(args.output).write_text(text)
    except OSError as exc:
        print(f"{_PROG}: cannot write {args.output}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    return 0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "asyncapi",
        help="write an app's AsyncAPI 3.0 document (JSON)",
        description="Import MODULE:ATTRIBUTE (without running it) and write the AsyncAPI 3.0 "
        "document of the App: a server per broker, a channel per stream, list or Pub/Sub "
        "channel its subscriptions read and its publishers write, the operations, and each "
        "message's payload schema from the handlers' annotations.",
    )
    parser.add_argument("app", metavar="MODULE:ATTRIBUTE", help="where the App is, e.g. svc:app")
    parser.add_argument(
        "--factory", action="store_true", help="ATTRIBUTE is a function that returns the App"
    )
    parser.add_argument(
        "-o", "--output", metavar="FILE", default=None, help="write here (default: stdout)"
    )
    parser.add_argument(
        "--app-version",
        default="0.1.0",
        metavar="VERSION",
        help="the document's info.version: the app's API version (default: 0.1.0)",
    )
    parser.add_argument(
        "--description", default=None, help="the document's info.description (default: none)"
    )
    parser.set_defaults(handler=_asyncapi)
