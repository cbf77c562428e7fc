"""The input of ``trio-streams file write``, read and checked whole before anything is written.

The input is what ``file decode --format ndjson`` prints: an optional first line
``{"file_header": {...}}``, then one message object a line. Every line is checked before the
file is touched — JSON, an object, its fields and their types, what the format can hold (the
stream key, the timestamp, the sizes), and that the sequence numbers of each stream (key and
shard) follow each other, from 1 (or 0) or from the stream's last in the file, as readers hold
them to — so a bad line 3 leaves the file as it was, not with lines 1 and 2 in it.
Internal messages (``SEA_STREAMER_INTERNAL``: the end-of-stream message and its kin, all
sequence number 0) are exempt from the sequence check.

Each error is an :class:`InputError` naming the line.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from .encoder import FrameEncoder
from .errors import StreamFileError
from .format import (
    DEFAULT_BEACON_INTERVAL,
    HEADER_SIZE,
    INTERNAL_KEY,
    MAX_TIMESTAMP_MS,
    Header,
    encode_header,
)
from .keys import check_stream_key

__all__ = [
    "InputError",
    "PublishRow",
    "Row",
    "WriteInput",
    "check_against",
    "header_from_json",
    "payload_from_json",
    "read_input",
    "read_publish_input",
]

_MESSAGE_SHAPE = (
    '{"stream_key": ..., "shard": ..., "seq": ..., "timestamp_ms": ..., "payload": ..., '
    '"encoding": "utf8" or "base64"}'
)


class InputError(ValueError):
    """A line of the input that cannot be written; the message starts with ``line N:``."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        super().__init__(f"line {line}: {message}")


@dataclass(frozen=True, slots=True)
class Row:
    """One message of the input, checked."""

    line: int
    stream_key: str
    shard: int
    seq: int
    timestamp_ms: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class WriteInput:
    header: Header | None
    rows: list[Row]


def header_from_json(row: dict[str, Any]) -> Header:
    """The header described by a ``{"file_header": ...}`` line."""
    fields = row["file_header"]
    if not isinstance(fields, dict):
        raise TypeError("file_header must be an object")
    return Header(
        str(fields["file_name"]), int(fields["created_at_ms"]), int(fields["beacon_interval"])
    )


def payload_from_json(row: dict[str, Any]) -> bytes:
    """The payload bytes of an ndjson object."""
    encoding = row.get("encoding", "utf8")
    text = row["payload"]
    if not isinstance(text, str):
        raise ValueError(
            f'payload must be a string (UTF-8 text, or base64 with "encoding": "base64"), '
            f"not {type(text).__name__} {json.dumps(text)[:40]}"
        )
    if encoding == "utf8":
        return text.encode("utf-8")
    if encoding == "base64":
        return base64.b64decode(text, validate=True)
    raise ValueError(f"encoding must be utf8 or base64, not {encoding!r}")


def read_input(lines: Iterable[str], *, beacon_interval: int | None = None) -> WriteInput:
    """Read every line and check it (see the module docstring); raises :class:`InputError`.

    ``beacon_interval`` is only used to check the frames as the file will hold them.
    """
    header: Header | None = None
    rows: list[Row] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        value = _json(number, line)
        if "file_header" in value:
            if rows or header is not None:
                raise InputError(number, "a file_header line must come first")
            try:
                header = header_from_json(value)
                encode_header(header)  # what the format refuses in a header
            except StreamFileError as exc:
                raise InputError(number, f"bad file_header: {exc.reason}") from None
            except (KeyError, ValueError, TypeError) as exc:
                raise InputError(number, f"bad file_header ({exc!r})") from None
            continue
        rows.append(_row(number, value))
    interval = beacon_interval or (header.beacon_interval if header else DEFAULT_BEACON_INTERVAL)
    _check_sequences(rows)
    _check_frames(rows, interval)
    return WriteInput(header, rows)


def check_against(rows: Iterable[Row], last_written: dict[tuple[str, int], int], path: str) -> None:
    """Refuse a row whose sequence number does not follow the last one its stream has in the
    file at ``path`` (``last_written``, by stream key and shard), or, for a stream the file does
    not hold, is above 1."""
    seen: set[tuple[str, int]] = set()
    for row in rows:
        stream = (row.stream_key, row.shard)
        if row.stream_key == INTERNAL_KEY or stream in seen:
            continue
        seen.add(stream)
        last = last_written.get(stream)
        if last is not None and row.seq != last + 1:
            raise InputError(
                row.line,
                f"seq {row.seq} of stream {_stream(row)} does not follow seq {last}, the last "
                f"of that stream in {path}: {_RULE}",
            )
        if last is None and row.seq > 1:
            raise InputError(
                row.line,
                f"seq {row.seq} would be the first of stream {_stream(row)} in {path}: {_RULE}",
            )


def _json(number: int, line: str) -> dict[str, Any]:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as exc:
        raise InputError(number, f"not JSON ({exc})") from None
    if not isinstance(value, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean"}.get(type(value), "a value")
        if value is None:
            kind = "null"
        elif isinstance(value, int | float) and not isinstance(value, bool):
            kind = "a number"
        raise InputError(
            number, f"a JSON object belongs here, one message a line ({_MESSAGE_SHAPE}), not {kind}"
        )
    return value


def _integer(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an integer, not {value!r}")
    return value


def _row(number: int, value: dict[str, Any]) -> Row:
    try:
        key = value["stream_key"]
        if not isinstance(key, str):
            raise TypeError(f"stream_key must be a string, not {key!r}")
        return Row(
            number,
            key,
            _integer(value.get("shard", 0), "shard"),
            _integer(value["seq"], "seq"),
            _integer(value["timestamp_ms"], "timestamp_ms"),
            payload_from_json(value),
        )
    except KeyError as exc:
        raise InputError(number, f"bad message: no {exc.args[0]!r} field") from None
    except (ValueError, TypeError, binascii.Error) as exc:
        raise InputError(number, f"bad message: {exc}") from None


def _check_frames(rows: list[Row], beacon_interval: int) -> None:
    """Encode every row into memory (and forget the bytes): what the format refuses (a key, a
    timestamp, a size) is refused here, before the file is touched."""
    encoder = FrameEncoder(beacon_interval, HEADER_SIZE)
    encoder.knows_every_stream = False  # the file's own streams are checked apart
    for row in rows:
        try:
            encoder.write(row.stream_key, row.shard, row.seq, row.timestamp_ms, row.payload)
        except StreamFileError as exc:
            raise InputError(row.line, exc.reason) from None
        encoder.take()


def _check_sequences(rows: list[Row]) -> None:
    last: dict[tuple[str, int], Row] = {}
    for row in rows:
        if row.stream_key == INTERNAL_KEY:
            continue
        stream = (row.stream_key, row.shard)
        before = last.get(stream)
        if before is not None and row.seq != before.seq + 1:
            what = "repeats" if row.seq == before.seq else "does not follow"
            what = "comes after" if row.seq < before.seq else what
            raise InputError(
                row.line,
                f"seq {row.seq} of stream {_stream(row)} {what} seq {before.seq} on line "
                f"{before.line}: {_RULE}",
            )
        last[stream] = row


#: What readers hold a stream's sequence numbers to (see ``docs/guides/stream-files.md``).
_RULE = "the sequence numbers of a stream start at 1 (or 0) and follow each other"


def _stream(row: Row) -> str:
    return repr(row.stream_key) if row.shard == 0 else f"{row.stream_key!r} shard {row.shard}"


@dataclass(frozen=True, slots=True)
class PublishRow:
    """One message of a ``trio-streams publish --ndjson`` input, checked."""

    line: int
    stream_key: str
    payload: bytes
    timestamp_ms: int | None
    headers: dict[str, str]


def read_publish_input(
    lines: Iterable[str],
    default_key: str | None,
    *,
    check_key: Callable[[str], object] = check_stream_key,
) -> list[PublishRow]:
    """Read and check the messages of a ``publish --ndjson`` input; raises :class:`InputError`.

    The lines are ``file write``'s (the output of ``file decode --format ndjson``): a first
    ``file_header`` line is skipped, and so are internal messages (the end-of-stream message
    decoding stops at). ``seq`` is not used: publishing numbers the messages after what the
    file holds. ``shard``, if given, must be 0; ``stream_key`` defaults to ``default_key``;
    ``timestamp_ms`` defaults to the time of publishing; ``headers``, an object of strings, is
    optional.

    ``check_key`` refuses a key the target cannot take by raising ``ValueError``: by default a
    stream file's rules (:func:`~.keys.check_stream_key`); a Redis key has its own.
    """
    rows: list[PublishRow] = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        value = _json(number, line)
        if "file_header" in value:
            if rows:
                raise InputError(number, "a file_header line must come first")
            continue
        try:
            key = value.get("stream_key", default_key)
            if key is None:
                raise ValueError("no stream_key, and no KEY on the command line")
            if not isinstance(key, str):
                raise TypeError(f"stream_key must be a string, not {key!r}")
            if key == INTERNAL_KEY:
                continue
            check_key(key)
            if _integer(value.get("shard", 0), "shard") != 0:
                raise ValueError("shard must be 0: publishing appends to shard 0")
            ts = value.get("timestamp_ms")
            if ts is not None and not 0 <= _integer(ts, "timestamp_ms") <= MAX_TIMESTAMP_MS:
                raise ValueError(f"timestamp_ms {ts} outside 0..{MAX_TIMESTAMP_MS}")
            headers = value.get("headers", {})
            if not isinstance(headers, dict) or not all(
                isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
            ):
                raise TypeError(f"headers must be an object of strings, not {headers!r}")
            rows.append(PublishRow(number, key, payload_from_json(value), ts, headers))
        except KeyError as exc:
            raise InputError(number, f"bad message: no {exc.args[0]!r} field") from None
        except (ValueError, TypeError, binascii.Error) as exc:  # ConfigurationError included
            raise InputError(number, f"bad message: {exc}") from None
    return rows
