"""The arguments of ``trio-streams replay FILE --to URL`` (the command is :mod:`..record`)."""

from __future__ import annotations

import argparse

from ..args import deferred, file_position, positive, redis_url

__all__ = ["register"]


def register(replay: argparse.ArgumentParser) -> None:
    """Give ``replay`` its description and arguments."""
    from ...record.headers import ID_HEADER

    replay.description = (
        "Publish the messages of a stream file to Redis with their payloads and "
        "headers (without the headers the recording added), as stream entries (XADD, new ids), "
        "list elements (RPUSH) or channel messages (PUBLISH, on the channel each was recorded "
        "from); unpaced, at a rate, or as recorded."
    )
    replay.add_argument("file", metavar="FILE", help="the stream file (.ss)")
    replay.add_argument(
        "--to", required=True, type=redis_url, metavar="URL", help="the deployment to write to"
    )
    replay.add_argument(
        "--stream", default=None, metavar="KEY",
        help="write every message to KEY (a stream, a list with --as list, a channel with --as "
        "channel); default: each message's stream key, or with --as channel the channel it was "
        "recorded from",
    )  # fmt: skip
    replay.add_argument("--key", action="append", help="only this stream key (repeatable)")
    replay.add_argument(
        "--as", dest="as_", choices=("stream", "list", "channel"), default=None,
        help="every message as a stream entry, a list element, or a channel message (each on "
        "the channel it was recorded from); default: each as what it was recorded from (a "
        "channel's message as a channel message, a list's element as a list element, else a "
        "stream entry)",
    )  # fmt: skip
    replay.add_argument(
        "--from", dest="start", type=file_position, default=None, metavar="POS",
        help="beginning, seq:N or ts:MS (the last two need one --key)",
    )  # fmt: skip
    pace = replay.add_mutually_exclusive_group()
    pace.add_argument(
        "--rate", type=positive(float), default=None, metavar="N", help="N messages a second"
    )
    pace.add_argument(
        "--as-recorded", action="store_true", help="keep the recorded gaps between messages"
    )
    pace.add_argument(
        "--speed", type=positive(float), default=None, metavar="X",
        help="as recorded, X times faster (0.5: twice as slow)",
    )  # fmt: skip
    replay.add_argument(
        "--keep-header", action="append", default=[], metavar="NAME",
        help=f"send a recording header anyway (e.g. {ID_HEADER})",
    )  # fmt: skip
    replay.add_argument(
        "--id-header", default=ID_HEADER, metavar="NAME",
        help=f"the header the recording kept entry ids in (default {ID_HEADER}): not sent",
    )  # fmt: skip
    replay.add_argument(
        "--limit", type=positive(int), default=None, metavar="N", help="stop after N messages"
    )
    replay.add_argument(
        "--keep-retries", action="store_true",
        help="send the retry copies the recording holds too (left out by default: each is a "
        "copy of a message in the recording, carrying x-ruststream-retry-count)",
    )  # fmt: skip
    replay.set_defaults(handler=deferred("trio_streams.cli.record", "replay"))
