"""The arguments of ``trio-streams top URL|FILE`` (the command is :mod:`..top`)."""

from __future__ import annotations

import argparse

from ..args import deferred, seconds, top_target

__all__ = ["register"]


def register(top: argparse.ArgumentParser) -> None:
    """Give ``top`` its description and arguments."""
    from ...top.render import SORTS

    top.description = (
        "Per stream and group: length, entries added/s, delivered/s, acked/s, "
        "pending, lag, consumers and their idle times (stuck ones marked), delayed retries and "
        "how many are due, dead-letter streams. Per key of a stream file: messages, messages/s, "
        "sequence range, bytes behind the writer; per consumer group of the file: position, "
        "lag, members, held messages, delayed retries. Per subscription of an app run with --http "
        "(http://HOST:PORT): received/s, handled/s, outcomes, retries, in flight, queued, lag, "
        "faults, degraded (with --workers: the app's line, then one per worker). Read-only: it "
        "joins no group. Keys in the live view: s sort, / filter, p pause, q quit."
    )
    top.add_argument(
        "target",
        type=top_target,
        metavar="URL|FILE",
        help="a Redis URL, a stream file (.ss), or http://HOST:PORT of an app's --http",
    )
    top.add_argument(
        "--once", action="store_true",
        help="print one snapshot as text (two samples --interval apart) and exit",
    )  # fmt: skip
    top.add_argument(
        "--interval", type=seconds(minimum=0.01), default=1.0, metavar="SECONDS",
        help="time between snapshots (default 1)",
    )  # fmt: skip
    top.add_argument(
        "--stream", action="append", default=[], metavar="KEY",
        help="watch this stream, or this key of a stream file (repeatable; default: every "
        "stream SCAN finds, every key of the file)",
    )  # fmt: skip
    top.add_argument("--match", default="*", metavar="GLOB", help="SCAN only keys matching GLOB")
    top.add_argument(
        "--dead-letter", action="append", default=[], metavar="GLOB",
        help="streams matching GLOB are dead-letter streams (trio-streams' own are found "
        "by their headers)",
    )  # fmt: skip
    top.add_argument(
        "--stuck-after", type=seconds(minimum=0.0), default=30.0, metavar="SECONDS",
        help="a consumer with pending entries idle this long is stuck (default 30)",
    )  # fmt: skip
    top.add_argument("--sort", choices=list(SORTS), default="name", help="the first sort order")
    top.add_argument("--filter", default="", metavar="TEXT", help="only streams matching TEXT")
    top.set_defaults(handler=deferred("trio_streams.cli.top", "show"))
