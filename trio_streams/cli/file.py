"""``trio-streams file decode FILE``: print a stream file's messages, one line each (and the
printers ``file tail`` shares).

``--format log`` (the default) prints a readable line a message, headers opened;
``--format ndjson`` the frames as stored, one JSON object a line after the file's header, the
input of ``trio-streams file write`` (the schema is in :mod:`.parsers.file`). Reading a file
needs no Trio: this module imports the reader and nothing of the runtime.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from json.encoder import encode_basestring_ascii as _json_string
from typing import Any, TextIO

from ..core.positions import Position, PositionKind
from ..file.envelope import open_envelope
from ..file.format import INTERNAL_KEY, Header, Message
from ..file.keys import check_file_keys
from ..file.positions import format_position, parse_position
from ..file.reader import FileReader
from .args import bad_command_line

__all__ = [
    "decode",
    "format_log",
    "header_to_json",
    "message_to_json",
    "ndjson_lines",
    "one_key",
    "printer",
]

#: Messages read, and their lines written, at a time: the batch the reader's own iteration
#: reads, so decoding holds no more messages than iterating the reader would.
_BATCH = 4096


def message_to_json(message: Message) -> dict[str, Any]:
    """The ndjson object of one message (UTF-8 payloads as text, anything else as base64)."""
    try:
        payload, encoding = message.payload.decode("utf-8"), "utf8"
    except UnicodeDecodeError:
        payload, encoding = base64.b64encode(message.payload).decode("ascii"), "base64"
    return {
        "stream_key": message.stream_key,
        "shard": message.shard,
        "seq": message.seq,
        "timestamp_ms": message.timestamp_ms,
        "payload": payload,
        "encoding": encoding,
    }


def header_to_json(header: Header) -> dict[str, Any]:
    """The first ndjson line of ``decode``: what ``write`` needs to recreate the header."""
    return {
        "file_header": {
            "file_name": header.file_name,
            "created_at_ms": header.created_at_ms,
            "beacon_interval": header.beacon_interval,
        }
    }


def format_log(message: Message) -> str:
    """A human-readable line: time, stream, seq, shard, offset, headers, then the payload.

    Header envelopes (``rs1:``/``rs2:``) are opened, so the payload shows as a handler sees it;
    ``--format ndjson`` keeps the frame bytes as stored, so ``write`` reproduces the file.
    """
    when = datetime.fromtimestamp(message.timestamp_ms / 1000, UTC)
    stamp = when.strftime("%Y-%m-%dT%H:%M:%S.") + f"{message.timestamp_ms % 1000:03d}Z"
    payload, headers = open_envelope(message.payload)
    try:
        shown = payload.decode("utf-8")
    except UnicodeDecodeError:
        shown = "base64:" + base64.b64encode(payload).decode("ascii")
    labels = "".join(f" {name}={value!r}" for name, value in headers.items())
    return (
        f"{stamp} {message.stream_key} #{message.seq} shard={message.shard} "
        f"@{message.offset}{labels} {shown}"
    )


def printer(fmt: str, out: TextIO) -> Callable[[Message], object]:
    """Print one message in ``fmt`` (``log`` or ``ndjson``) on ``out``: ``file tail``'s printer,
    a line at a time as messages come."""
    if fmt == "ndjson":
        quoted: dict[str, str] = {}
        return lambda message: out.write(ndjson_lines((message,), quoted))
    return lambda message: out.write(format_log(message) + "\n")


def ndjson_lines(messages: Iterable[Message], quoted_keys: dict[str, str]) -> str:
    """The ndjson lines of ``messages``: byte for byte ``json.dumps(message_to_json(m)) + "\n"``
    for each (the same separators, the same ASCII escapes: a string goes through the very
    function ``json.dumps`` uses, an int is its ``repr`` as there), without a dict or an encoder
    call per line. ``quoted_keys`` keeps each stream key as a JSON string, made once."""
    lines: list[str] = []
    append = lines.append
    for key, shard, seq, timestamp_ms, payload, _ in messages:
        key_text = quoted_keys.get(key)
        if key_text is None:
            key_text = quoted_keys[key] = _json_string(key)
        try:
            text, encoding = _json_string(payload.decode("utf-8")), "utf8"
        except UnicodeDecodeError:  # base64 is ASCII that JSON leaves as it is
            text, encoding = f'"{base64.b64encode(payload).decode("ascii")}"', "base64"
        append(
            f'{{"stream_key": {key_text}, "shard": {shard}, "seq": {seq}, '
            f'"timestamp_ms": {timestamp_ms}, "payload": {text}, "encoding": "{encoding}"}}\n'
        )
    return "".join(lines)


def _log_lines(messages: Iterable[Message]) -> str:
    return "".join([format_log(message) + "\n" for message in messages])


def _batches(reader: FileReader) -> Iterator[list[Message]]:
    """The messages iterating ``reader`` gives, in the lists it reads them in: its own loop
    (``FileReader.__iter__``) a list at a time, so the same messages come, then the same end
    or the same error, after the messages before it."""
    while True:
        batch = reader.read_messages(_BATCH)
        if not batch:
            if reader.eos is None and not reader.at_eof:
                continue
            reader.check_finished()
            return
        yield batch


def one_key(keys: list[str] | None, position: Position) -> str | None:
    if position.kind in (PositionKind.SEQUENCE, PositionKind.TIMESTAMP):
        if not keys or len(keys) != 1:
            bad_command_line(f"--from {format_position(position)} needs exactly one --key")
        return keys[0]
    return None


def decode(args: argparse.Namespace) -> int:
    position = parse_position(args.start)
    key = one_key(args.key, position)
    out = sys.stdout
    quoted: dict[str, str] = {}
    lines: Callable[[list[Message]], str] = (
        (lambda batch: ndjson_lines(batch, quoted)) if args.format == "ndjson" else _log_lines
    )
    # Internal messages are printed unless other keys were asked for; the end-of-stream message
    # decoding stops at always is (the last line), so `decode | write` gives the file back.
    internal = args.key is None or INTERNAL_KEY in args.key
    check_file_keys(args.file, args.key)
    with FileReader(args.file, keys=args.key, internal=internal) as reader:
        if args.format == "ndjson" and args.header:
            out.write(json.dumps(header_to_json(reader.header)) + "\n")
        if position != Position.beginning():
            reader.seek(position, key=key)
        # A batch's lines in one write: what the reader decoded before an error it raises is
        # printed before the error is, as when each line was written on its own.
        for batch in _batches(reader):
            out.write(lines(batch))
        if reader.eos is not None:
            out.write(lines([reader.eos]))
    return 0
