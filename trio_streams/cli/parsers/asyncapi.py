"""The arguments of ``trio-streams asyncapi MODULE:ATTRIBUTE`` (the command is
:mod:`..asyncapi`)."""

from __future__ import annotations

import argparse

from ..args import deferred

__all__ = ["register"]


def register(parser: argparse.ArgumentParser) -> None:
    """Give ``asyncapi`` its description and arguments."""
    parser.description = (
        "Import MODULE:ATTRIBUTE (without running it) and write the AsyncAPI 3.0 "
        "document of the App: a server per broker, a channel per stream, list or Pub/Sub "
        "channel its subscriptions read and its publishers write, the operations, and each "
        "message's payload schema from the handlers' annotations."
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
    parser.set_defaults(handler=deferred("trio_streams.cli.asyncapi", "write_document"))
