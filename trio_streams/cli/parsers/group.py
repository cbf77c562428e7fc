"""``trio-streams group set-position URL STREAM GROUP POSITION``: move a Redis consumer group.

The group's last delivered id is set (``XGROUP SETID``, with ``ENTRIESREAD`` where the server
takes it, so its lag stays right) for every consumer of it: ``beginning`` (the whole stream is
delivered again), ``end`` (the last id now), an entry id ``<ms>-<seq>`` (that entry is
delivered next) or ``ts:MS`` (the first entry strictly later). One line says what moved: the
last delivered id before and after, how many entries were skipped or will be delivered again,
and their first and last ids. ``--dry-run`` says the same of the move without making it.
"""

from __future__ import annotations

import argparse

from ..args import deferred, group_position, guarded, plain_help, redis_url

__all__ = ["register"]


def register(group: argparse.ArgumentParser) -> None:
    """Give ``group`` its subcommand ``set-position`` and its arguments."""
    group.description = "Manage Redis consumer groups."
    actions = group.add_subparsers(dest="action", metavar="ACTION", required=True)
    move = actions.add_parser(
        "set-position",
        help="move a consumer group (XGROUP SETID), or --dry-run to see what it would skip",
        description=plain_help(__doc__),
    )
    move.add_argument(
        "url", metavar="URL", type=redis_url, help="the deployment, e.g. redis://host:6379/0"
    )
    move.add_argument("stream", metavar="STREAM", help="the stream key")
    move.add_argument("group", metavar="GROUP", help="the consumer group")
    move.add_argument(
        "position",
        metavar="POSITION",
        type=group_position,
        help="beginning, end, an entry id <ms>-<seq> (delivered next) or ts:MS",
    )
    move.add_argument(
        "--dry-run",
        action="store_true",
        help="say what the move would skip or replay, and move nothing",
    )
    move.set_defaults(handler=guarded(deferred("trio_streams.cli.group", "set_position")))
