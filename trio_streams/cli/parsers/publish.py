"""``trio-streams publish TARGET KEY [PAYLOAD]``: publish messages from the command line.

TARGET is a stream file (.ss, created if missing) or a Redis URL (``redis://HOST:PORT/DB``,
``rediss://``, ``redis+cluster://``, ``redis+sentinel://``). The payload comes from the
argument, ``--file``, or stdin (bytes as they are; an empty one only with ``--allow-empty``);
``-H name=value`` adds headers (those an app's handlers see); ``--ndjson`` reads many messages,
one JSON object a line in the schema of ``trio-streams file write``. Every message is checked
before anything is published. One receipt a line is printed: ``KEY seq:N ts:MS offset:BYTES``
for a stream file; for Redis, ``KEY id:MS-SEQ`` for a stream entry (the default), ``KEY
length:N`` with ``--list`` (the list's length after the push), ``KEY receivers:N`` with
``--channel`` (the subscribers it reached).

To a stream file, all the messages go out in one append: no other writer's message comes
between them. Running apps and other publishers may write the file at the same time:
publishing takes the file's lock for the append only. To Redis, each message is written as an
app's RedisBroker.publish writes it, so a running app's handlers receive it with its headers
(:mod:`.publish_redis`). Options that only one kind of target has are refused for the
other, by name: ``--list``, ``--channel`` and ``--sharded`` are Redis's, ``--beacon-interval`` a
new file's.
"""

from __future__ import annotations

import argparse

from ..args import beacon_interval, deferred, guarded, header, plain_help, publish_target

__all__ = ["register"]


def register(parser: argparse.ArgumentParser) -> None:
    """Give ``publish`` its description and arguments."""
    from ...file.format import DEFAULT_BEACON_INTERVAL

    parser.description = plain_help(__doc__)
    parser.epilog = plain_help(__doc__, 2)
    parser.add_argument(
        "target",
        metavar="TARGET",
        type=publish_target,
        help="a stream file (.ss, created if missing), or a Redis URL: redis://HOST:PORT/DB, "
        "rediss://..., redis+cluster://..., redis+sentinel://...",
    )
    parser.add_argument(
        "key", metavar="KEY", nargs="?", help="the stream key (the list or channel for Redis)"
    )
    parser.add_argument(
        "payload", metavar="PAYLOAD", nargs="?", help="the payload (default: --file, else stdin)"
    )
    parser.add_argument("--file", metavar="PATH", help="read the payload (or --ndjson) from PATH")
    parser.add_argument(
        "-H",
        "--header",
        action="append",
        type=header,
        metavar="NAME=VALUE",
        help="a header of every message (repeatable)",
    )
    parser.add_argument(
        "--allow-empty",
        action="store_true",
        help="publish an empty payload (refused without it, as a likely mistake)",
    )
    parser.add_argument(
        "--ndjson",
        action="store_true",
        help="many messages, one JSON object a line, as `file decode --format ndjson` prints "
        "them (seq is not used, nor timestamp_ms for Redis; stream_key defaults to KEY; "
        "optional headers object)",
    )
    parser.add_argument(
        "--beacon-interval",
        type=beacon_interval,
        default=None,
        help=f"bytes between beacons if the file is created (default {DEFAULT_BEACON_INTERVAL})",
    )
    kind = parser.add_mutually_exclusive_group()
    kind.add_argument(
        "--list",
        action="store_true",
        help="Redis: push to the list KEY (RPUSH), as broker.publish(Destination.list(KEY)) does",
    )
    kind.add_argument(
        "--channel",
        action="store_true",
        help="Redis: PUBLISH to the Pub/Sub channel KEY, as Destination.channel(KEY) does",
    )
    parser.add_argument(
        "--sharded", action="store_true", help="with --channel: SPUBLISH, to a sharded channel"
    )
    parser.set_defaults(handler=guarded(deferred("trio_streams.cli.publish", "publish")))
