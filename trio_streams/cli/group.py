"""``trio-streams group set-position``: move a Redis consumer group for all its consumers (the
arguments and what the command does are in :mod:`.parsers.group`)."""

from __future__ import annotations

import argparse
import sys

import trio

from ..core.group_moves import GroupMove
from .args import parse_group_position

__all__ = ["set_position"]


async def _move(args: argparse.Namespace) -> GroupMove:
    from ..redis.client import connect
    from ..redis.group_position import move_group

    async with connect(args.url) as client:
        return await move_group(
            client, args.stream, args.group, parse_group_position(args.position),
            dry_run=args.dry_run,
        )  # fmt: skip


def set_position(args: argparse.Namespace) -> int:
    """Move the group as the command line says, and print what moved."""
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
