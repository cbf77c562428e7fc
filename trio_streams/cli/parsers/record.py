"""The arguments of ``trio-streams record URL KEY --to FILE`` (the command is :mod:`..record`)."""

from __future__ import annotations

import argparse

from ..args import deferred, positive, record_bound, redis_url

__all__ = ["register"]


def register(record: argparse.ArgumentParser) -> None:
    """Give ``record`` its description and arguments."""
    from ...record.headers import ID_HEADER

    record.description = (
        "Copy the entries of a Redis stream (XRANGE pages, then XREAD BLOCK with "
        "--follow; never a consumer group), a list (one LRANGE snapshot, nothing taken) or a "
        "channel (SUBSCRIBE, until stopped) into a stream file. Payloads and headers are kept "
        "(the file's rs1/rs2 envelope), each entry's time is the message's timestamp and its id "
        f"the header {ID_HEADER}. SIGINT/SIGTERM stop it cleanly: the file is flushed and "
        "closed, and a summary line is printed."
    )
    record.add_argument(
        "url", metavar="URL", type=redis_url, help="the deployment, e.g. redis://host:6379/0"
    )
    record.add_argument("source", metavar="KEY", help="the stream, list or channel to record")
    record.add_argument("--to", required=True, metavar="FILE", help="the stream file (.ss)")
    record.add_argument(
        "--key", default=None, help="the file's stream key (default: the Redis key's name)"
    )
    record.add_argument(
        "--from", dest="start", type=record_bound("--from"), default=None, metavar="ID|ts:MS|end",
        help="first entry: an id (inclusive), ts:MS (strictly later), or end (only new "
        "entries; with --follow); default: the beginning",
    )  # fmt: skip
    until = record.add_mutually_exclusive_group()
    until.add_argument(
        "--until", type=record_bound("--until"), default=None, metavar="ID|ts:MS",
        help="last entry: an id or ts:MS (inclusive); default: the last one when recording began",
    )  # fmt: skip
    until.add_argument(
        "--follow", action="store_true", help="after the backlog, record new entries until stopped"
    )
    kind = record.add_mutually_exclusive_group()
    kind.add_argument("--channel", action="store_true", help="KEY is a Pub/Sub channel")
    kind.add_argument("--pattern", action="store_true", help="KEY is a Pub/Sub pattern")
    record.add_argument(
        "--limit", type=positive(int), default=None, metavar="N", help="stop after N entries"
    )
    record.add_argument(
        "--append", action="store_true",
        help="record into a file key that also holds messages not recorded from Redis (refused "
        "otherwise)",
    )  # fmt: skip
    record.add_argument(
        "--id-header", default=ID_HEADER, metavar="NAME",
        help=f"the header that keeps each entry's id (default {ID_HEADER}; '' for none)",
    )  # fmt: skip
    record.add_argument(
        "--progress", choices=("auto", "bar", "plain", "none"), default="auto",
        help="auto: a bar on a terminal (with the tui extra), plain lines on stderr otherwise",
    )  # fmt: skip
    record.set_defaults(handler=deferred("trio_streams.cli.record", "record"))
