"""``trio-streams file tail FILE``: follow a stream file live, printing each new message as
``file decode`` does (the follower's inotify source, on Trio)."""

from __future__ import annotations

import argparse
import sys

import trio

from ..core.positions import Position
from ..file.follower import FileSource
from ..file.positions import parse_position
from .file import one_key, printer

__all__ = ["tail"]


async def _follow(args: argparse.Namespace) -> None:
    position = parse_position(args.start)
    key = one_key(args.key, position)
    emit = printer(args.format, sys.stdout)
    async with await FileSource.open(args.file, mode="live", keys=args.key) as source:
        if position != Position.end():
            await source.seek(position, key=key)
        while True:
            batch = source.read_available(1024)
            for message in batch:
                emit(message)
            if batch:
                sys.stdout.flush()
            else:
                await source.wait()


def tail(args: argparse.Namespace) -> int:
    try:
        trio.run(_follow, args)
    except KeyboardInterrupt:
        return 130
    return 0
