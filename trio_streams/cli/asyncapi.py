"""``trio-streams asyncapi MODULE:ATTRIBUTE``: write an app's AsyncAPI 3.0 document."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from ..core.errors import ConfigurationError
from ..integrations.asyncapi import asyncapi_document
from .run import AppImportFailed, AppNotFound, load_app

__all__ = ["write_document"]

_PROG = "trio-streams asyncapi"


def write_document(args: argparse.Namespace) -> int:
    """Write the AsyncAPI document of the app the command line names; the exit status."""
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
