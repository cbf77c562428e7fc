"""``trio-streams publish TARGET KEY [PAYLOAD]``: publish messages from the command line.

The payload comes from the argument, ``--file``, or stdin (bytes as they are; an empty one only
with ``--allow-empty``); ``-H name=value``
adds headers (in the envelope an app's handlers open); ``--ndjson`` reads many messages, one
JSON object a line in the schema of ``trio-streams file write``. Every message is checked before
anything is published, and all of them go out in one append: no other writer's message comes
between them. One receipt a line is printed: ``KEY seq:N ts:MS offset:BYTES``.

The target is a stream file path. It may be written by running apps and other publishers at the
same time: publishing takes the file's lock for the append only. The target's form picks the
transport, so other transports can add theirs (``redis://...`` is refused for now, by name).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from ..file.envelope import open_envelope, seal
from ..file.format import DEFAULT_BEACON_INTERVAL
from ..file.ndjson_input import InputError, PublishRow, read_publish_input
from ..file.writer import StreamWriter
from .args import (
    URL_SCHEME,
    bad_command_line,
    beacon_interval,
    error_line,
    guarded,
    header,
    plain_help,
    stream_key,
)

__all__ = ["register"]


def _read_payload(args: argparse.Namespace) -> bytes:
    payload = _payload_given(args)
    if not payload and not args.allow_empty:
        bad_command_line("the payload is empty; give one, or --allow-empty to publish it")
    return payload


def _payload_given(args: argparse.Namespace) -> bytes:
    """The payload from the argument, ``--file`` or stdin. At a terminal, stdin is announced
    first (one line on stderr), so the command is not taken for hung."""
    if args.payload is not None:
        if args.file is not None:
            bad_command_line("give the payload as an argument or with --file, not both")
        return str(args.payload).encode("utf-8")
    if args.file is not None:
        try:
            with open(args.file, "rb") as source:
                return source.read()
        except OSError as exc:
            raise SystemExit(_unreadable(args.file, exc)) from None
    if sys.stdin.isatty():
        print("reading the payload from stdin (Ctrl-D to end)", file=sys.stderr, flush=True)
    return sys.stdin.buffer.read()


def _unreadable(path: str, exc: OSError) -> str:
    return error_line(f"cannot read --file {path}: {exc.strerror}")


def _items(args: argparse.Namespace) -> list[tuple[str, bytes, int | None]]:
    """The messages to publish, checked whole before anything is written."""
    common = dict(args.header or [])
    if args.ndjson:
        if args.payload is not None:
            bad_command_line("--ndjson reads the messages from stdin or --file, not PAYLOAD")
        if args.file is not None:
            try:
                with open(args.file, encoding="utf-8") as source:
                    lines = source.read().splitlines()
            except OSError as exc:
                raise SystemExit(_unreadable(args.file, exc)) from None
        else:
            lines = sys.stdin.read().splitlines()
        try:
            rows = read_publish_input(lines, args.key)
        except InputError as exc:
            raise SystemExit(error_line(f"{exc}; nothing was published")) from None
        return [(row.stream_key, _stored(row, common), row.timestamp_ms) for row in rows]
    if args.key is None:
        bad_command_line("KEY is needed (or --ndjson, whose lines name their keys)")
    return [(args.key, seal(_read_payload(args), common), None)]


def _publish_file(args: argparse.Namespace, items: list[tuple[str, bytes, int | None]]) -> int:
    with StreamWriter(args.target, beacon_interval=args.beacon_interval) as writer:
        receipts = writer.publish_many(items)
    sys.stdout.write("".join(f"{receipt}\n" for receipt in receipts))
    return 0


def _publish(args: argparse.Namespace) -> int:
    url = URL_SCHEME.match(args.target)
    if url is not None:
        from ..redis.client.config import redact_url

        shown = redact_url(args.target)
        raise SystemExit(
            error_line(
                f"cannot publish to {shown}: publish writes stream files, not {url.group(1)}://"
                " targets; give the path of a stream file (.ss), and `trio-streams replay` it"
                " to Redis"
            )
        )
    items = _items(args)
    return _publish_file(args, items)


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``publish`` to the ``trio-streams`` parser."""
    parser = commands.add_parser(
        "publish",
        help="publish messages to a stream file (while apps write it too)",
        description=plain_help(__doc__),
    )
    parser.add_argument("target", metavar="FILE", help="the stream file (.ss), created if missing")
    parser.add_argument("key", metavar="KEY", nargs="?", type=stream_key, help="the stream key")
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
        "them (seq is not used; stream_key defaults to KEY; optional headers object)",
    )
    parser.add_argument(
        "--beacon-interval",
        type=beacon_interval,
        default=DEFAULT_BEACON_INTERVAL,
        help=f"bytes between beacons if the file is created (default {DEFAULT_BEACON_INTERVAL})",
    )
    parser.set_defaults(handler=guarded(_publish))


def _stored(row: PublishRow, common: Mapping[str, str]) -> bytes:
    """A ``--ndjson`` row's bytes in the file. Its ``payload`` is a frame as stored (the schema
    ``file decode --format ndjson`` prints): a header envelope in it is the message's headers,
    kept, with the row's ``headers`` and ``-H`` ones over them, so copying a file's decoded
    messages keeps their payloads and headers."""
    payload, stored = open_envelope(row.payload)
    return seal(payload, {**stored, **common, **row.headers})
