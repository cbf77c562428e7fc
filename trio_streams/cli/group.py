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
import sys

import trio

from ..core.group_moves import GroupMove
from .args import group_position, guarded, parse_group_position, plain_help, redis_url

__all__ = ["register"]


async def _move(args: argparse.Namespace) -> GroupMove:
    from ..redis.client import connect
    from ..redis.group_position import move_group

    async with connect(args.url) as client:
        return await move_group(
            client, args.stream, args.group, parse_group_position(args.position),
            dry_run=args.dry_run,
        )  # fmt: skip


def _set_position(args: argparse.Namespace) -> int:
    move = trio.run(_move, args)
    sys.stdout.write(move.describe() + "\n")
    if move.consumers:
        names = ", ".join(move.consumers[:10]) + (" ..." if len(move.consumers) > 10 else "")
        when = "read" if move.moved else "would read"
        sys.stdout.write(
            f"  its {len(move.consumers)} consumers ({names}) {when} after {move.now} at their "
            "next read; what they hold stays theirs\n"
        )
    return 0


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``group`` (``group set-position``) to the ``trio-streams`` parser."""
    group = commands.add_parser(
        "group",
        help="manage Redis consumer groups (set-position)",
        description="Manage Redis consumer groups.",
    )
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
    move.set_defaults(handler=guarded(_set_position))
