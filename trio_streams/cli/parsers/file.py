"""The arguments of ``trio-streams file decode|tail|stat|write|repair|group`` (each command is
its own module: :mod:`..file` (decode), :mod:`..file_tail`, :mod:`..file_stat`, :mod:`..file_write`,
:mod:`..file_repair`, :mod:`..file_groups`).

``decode --format ndjson`` prints, and ``write`` reads, first the file's header as
``{"file_header": {"file_name", "created_at_ms", "beacon_interval"}}``, then one message a line
as ``{"stream_key", "shard", "seq", "timestamp_ms", "payload", "encoding"}`` with ``encoding``
``utf8`` (the payload is the text) or ``base64``. Every message is printed, internal ones and the
end-of-stream message decoding stops at included, so the two round-trip byte for byte.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from ..args import (
    beacon_interval,
    deferred,
    file_group,
    file_position,
    guarded,
    seconds,
    stream_key,
)

__all__ = ["register"]


def _handler(module: str, name: str) -> Callable[[argparse.Namespace], int]:
    """The command ``name`` of ``trio_streams.cli.<module>``, imported when it runs."""
    return guarded(deferred(f"trio_streams.cli.{module}", name))


def register(parser: argparse.ArgumentParser) -> None:
    """Give ``file`` its subcommands and their arguments."""
    from ...file.format import DEFAULT_BEACON_INTERVAL
    from ...file.lock import EXCLUSIVE_WAIT

    sub = parser.add_subparsers(dest="file_command", metavar="SUBCOMMAND", required=True)

    def reading(name: str, help_text: str, default_from: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text)
        p.add_argument("file", help="the stream file (.ss)")
        p.add_argument(
            "--format",
            choices=("log", "ndjson"),
            default="log",
            help="log: one readable line a message, headers opened (default); ndjson: the "
            "frames as stored, one JSON object a line, the input format of `write`",
        )
        p.add_argument("--key", action="append", help="only this stream key (repeatable)")
        if name == "decode":
            p.add_argument(
                "--no-header",
                dest="header",
                action="store_false",
                help="ndjson: leave out the first line, the file header",
            )
        p.add_argument(
            "--from",
            dest="start",
            type=file_position,
            default=default_from,
            metavar="POS",
            help=f"beginning, end, seq:N or ts:MS (default {default_from})",
        )
        return p

    reading("decode", "print the messages of a file", "beginning").set_defaults(
        handler=_handler("file", "decode")
    )
    reading("tail", "follow a file live, printing new messages", "end").set_defaults(
        handler=_handler("file_tail", "tail")
    )
    stat = sub.add_parser("stat", help="header, streams, counts, sequence ranges, beacons")
    stat.add_argument("file", help="the stream file (.ss)")
    stat.add_argument("--progress", action="store_true", help="always show the progress bar")
    stat.set_defaults(handler=_handler("file_stat", "stat"))
    write = sub.add_parser(
        "write",
        help="write ndjson messages from stdin into a file",
        description="Write the messages of an ndjson input (the output of `decode --format "
        "ndjson`) into FILE, created if missing. The whole input is read into memory and "
        "checked first (every line, and that each stream's sequence numbers increase, also "
        "after the file's own), so a bad line leaves the file as it was: all or nothing. A huge "
        "input needs as much memory as its payloads take.",
    )
    write.add_argument("file", help="the stream file to create or append to")
    write.add_argument(
        "--beacon-interval",
        type=beacon_interval,
        default=None,
        help="bytes between beacons for a new file (default: the file_header line's, else "
        f"{DEFAULT_BEACON_INTERVAL})",
    )
    write.add_argument(
        "--created-at-ms",
        type=int,
        default=None,
        help="the header's creation time (default: the file_header line's, else now)",
    )
    write.add_argument(
        "--file-name",
        default=None,
        help="the header's file name (default: the file_header line's, else the file's name)",
    )
    write.add_argument("--eos", action="store_true", help="end with an end-of-stream message")
    write.add_argument(
        "--eos-timestamp-ms",
        type=int,
        default=None,
        help="the end-of-stream message's timestamp (default: now)",
    )
    write.set_defaults(handler=_handler("file_write", "write"))
    repair = sub.add_parser(
        "repair",
        help="move the part of a file that does not decode into a side file, then truncate",
    )
    repair.add_argument("file", help="the stream file (.ss)")
    repair.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    repair.add_argument("--dry-run", action="store_true", help="only say what would be done")
    repair.add_argument(
        "--wait",
        type=seconds(),
        default=EXCLUSIVE_WAIT,
        metavar="SECONDS",
        help="how long to wait for writers' appends to let repair have the file to itself "
        f"(default {EXCLUSIVE_WAIT:g})",
    )
    repair.set_defaults(handler=_handler("file_repair", "repair"))
    _register_group(sub)


def _register_group(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``file group reset|delete|set-position``."""
    parser = sub.add_parser(
        "group",
        help="manage the consumer groups of a stream file (set-position, reset, delete)",
        description="Manage the consumer groups kept beside a stream file (FILE.groups/). "
        "Each command holds the group's lock while it works, and is refused while a member "
        "of the group runs; `trio-streams file stat FILE` shows the groups.",
    )
    actions = parser.add_subparsers(dest="group_command", metavar="ACTION", required=True)

    def action(name: str, help_text: str, description: str) -> argparse.ArgumentParser:
        p = actions.add_parser(name, help=help_text, description=description)
        p.add_argument("file", help="the stream file (.ss)")
        p.add_argument("group", metavar="GROUP", type=file_group, help="the consumer group")
        return p

    def key_option(p: argparse.ArgumentParser) -> None:
        p.add_argument(
            "--key",
            type=stream_key,
            help="the stream a seq:N or ts:MS position is of (needed when the group reads several)",
        )

    move = action(
        "set-position",
        "move a group for all its members, or --dry-run to see what it would skip",
        "Set the group's position for all its members: it handles what follows POSITION, in "
        "file order. What members took and did not settle, and the retries that wait, stay as "
        "they are. Refused while a member is live (its process runs and its lease has not run "
        "out).",
    )
    move.add_argument(
        "position",
        metavar="POSITION",
        type=file_position,
        help="beginning, end (the end of the file now), seq:N (the first message of the "
        "stream with seq N or more) or ts:MS (the first message strictly later)",
    )
    key_option(move)
    move.add_argument(
        "--dry-run",
        action="store_true",
        help="say what the move would skip or replay, and move nothing",
    )
    move.set_defaults(handler=_handler("file_groups", "set_position"))
    reset = action(
        "reset",
        "move a group and forget what it held, its waiting retries and its gone members",
        "Move the group (to --to POS, or where it stands: its first unsettled message) and "
        "forget the messages its members took and did not settle (from its position on they "
        "are delivered again), its waiting retries, and its members, which must all be gone: "
        "refused while a member process runs.",
    )
    reset.add_argument(
        "--to",
        type=file_position,
        default=None,
        metavar="POS",
        help="beginning, end, seq:N or ts:MS (default: where the group stands)",
    )
    key_option(reset)
    reset.set_defaults(handler=_handler("file_groups", "reset"))
    delete = action(
        "delete",
        "remove a group's state: its next member starts it anew",
        "Remove the group's directory beside the file (its state, lock, bell, its members' "
        "locks and run journals; nothing else). Refused while a member process runs. Its state "
        "need not be readable.",
    )
    delete.set_defaults(handler=_handler("file_groups", "delete"))
