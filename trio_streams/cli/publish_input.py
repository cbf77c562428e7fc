"""The messages ``trio-streams publish`` sends, read and checked whole before any is published.

Whatever the target, the input is the same: the payload from the argument, ``--file`` or stdin
(bytes as they are; an empty one only with ``--allow-empty``), or with ``--ndjson`` many
messages, one JSON object a line in the schema of ``trio-streams file write``
(:func:`~trio_streams.file.ndjson_input.read_publish_input`); ``-H name=value`` headers on every
message. Each message comes out as an :class:`Outgoing`: its key, its payload and its headers as
a handler sees them (a ``--ndjson`` payload is the frame as a stream file stores it, so a header
envelope in it is opened: its headers are the message's, with the row's ``headers`` and the
``-H`` ones over them). The target decides which keys it takes (``check_key``) and how the
message is written.

A bad command line (``KEY`` missing or refused, ``PAYLOAD`` with ``--ndjson``...) exits 2; an
input that cannot be read, or a ``--ndjson`` line that is bad, exits 1, naming the line and
saying nothing was published. Nothing here is async.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .args import bad_command_line, error_line

__all__ = ["Outgoing", "read_messages"]


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to publish, checked: where it goes, its payload and headers, and its time
    (``timestamp_ms``, for a stream file; None: the time it is published)."""

    key: str
    payload: bytes
    headers: Mapping[str, str]
    timestamp_ms: int | None = None


def read_messages(args: argparse.Namespace, check_key: Callable[[str], object]) -> list[Outgoing]:
    """Every message of the command line's input, checked; ``check_key`` refuses a key the
    target cannot take by raising ``ValueError``."""
    common = dict(args.header or [])
    _check_text(common, "-H", bad_command_line)
    if args.key is not None:
        try:
            check_key(args.key)
        except ValueError as exc:
            bad_command_line(f"argument KEY: {exc}")
    if args.ndjson:
        return _ndjson_messages(args, common, check_key)
    if args.key is None:
        bad_command_line("KEY is needed (or --ndjson, whose lines name their keys)")
    return [Outgoing(args.key, _read_payload(args), common)]


def _ndjson_messages(
    args: argparse.Namespace, common: Mapping[str, str], check_key: Callable[[str], object]
) -> list[Outgoing]:
    from ..file.envelope import open_envelope  # only --ndjson payloads are opened here
    from ..file.ndjson_input import InputError, read_publish_input

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
    messages = []
    try:
        for row in read_publish_input(lines, args.key, check_key=check_key):
            payload, stored = open_envelope(row.payload)
            headers = {**stored, **common, **row.headers}

            def refuse(message: str, line: int = row.line) -> None:
                raise InputError(line, f"bad message: {message}")

            _check_text(row.headers, "headers", refuse)
            messages.append(Outgoing(row.stream_key, payload, headers, row.timestamp_ms))
    except InputError as exc:
        raise SystemExit(error_line(f"{exc}; nothing was published")) from None
    return messages


def _check_text(headers: Mapping[str, str], where: str, refuse: Callable[[str], object]) -> None:
    """Refuse a header whose name or value is not UTF-8 text (a lone surrogate, as a JSON
    ``\\ud800`` escape or an argument of undecodable bytes gives): no target can carry it."""
    for name, value in headers.items():
        for what, text in (("name", name), ("value", value)):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:
                refuse(f"{where}: the {what} of header {name!r} is not UTF-8 text ({exc.reason})")


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
        return str(args.payload).encode("utf-8", "surrogateescape")
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
