"""``trio-streams publish TARGET KEY [PAYLOAD]``: to a stream file (:mod:`.publish_file`) or to
Redis (:mod:`.publish_redis`); the arguments are in :mod:`.parsers.publish`.

Each target's module is imported only when the command line names that kind of target: a
publish to a file imports the file's writer, and no Redis client.
"""

from __future__ import annotations

import argparse

from .args import REDIS_SCHEMES, bad_command_line

__all__ = ["publish"]

#: The options of a Redis target only.
_REDIS_OPTIONS = ("list", "channel", "sharded")


def publish(args: argparse.Namespace) -> int:
    """Publish what the command line gives to its target; the exit status."""
    if args.sharded and not args.channel:
        bad_command_line("--sharded goes with --channel: it publishes to a sharded channel")
    if args.target.startswith(REDIS_SCHEMES):
        from .publish_redis import publish_to_redis

        return publish_to_redis(args)
    for name in _REDIS_OPTIONS:
        if getattr(args, name):
            bad_command_line(
                f"--{name} is for a Redis target (redis://...); {args.target} is a stream file, "
                "which holds streams only"
            )
    from .publish_file import publish_to_file

    return publish_to_file(args)
