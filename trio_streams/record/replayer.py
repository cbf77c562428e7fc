"""Publishing a recording back: each message of a stream file as a stream entry (``XADD``),
a list element (``RPUSH``) or a Pub/Sub message (``PUBLISH``).

A message's payload and headers go out as they were recorded (``_payload`` and ``h:<name>``
fields, or the list/Pub/Sub frame), without the headers the recording added
(:data:`~.headers.RECORDING_HEADERS`) unless asked to keep them. An entry recorded from a
producer whose fields the layout cannot hold (:data:`~.headers.FIELDS_HEADER`) gets its fields
back as they were, byte for byte. Entries get new ids (``*``): a stream's ids belong to the
server that made them.

Messages due at once are sent in batches of up to ``batch`` commands (one script each, see
:mod:`.sending`), so an unpaced replay takes one round trip per batch; a paced one sleeps on
Trio's clock until each is due and sends what is due together. The first refused command stops
the replay with :class:`ReplayError` naming the message: what was published before it stays
published, and nothing after it is.

A recording whose last frame is cut short (a crash while it was written) is replayed up to the
cut: every complete message goes out, then :class:`~trio_streams.file.errors.TruncatedError`
names the file and the byte offset.

Cancellation: a replay may be cancelled at any await; a pipeline already sent may or may not
have been applied (the summary counts only what was confirmed).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Literal, final

import trio

from ..core.delivery import RETRY_COUNT_HEADER, RETRY_TARGET_HEADER
from ..core.errors import TrioStreamsError
from ..core.positions import Position, PositionKind
from ..file.envelope import open_envelope
from ..file.format import Message
from ..file.keys import check_file_keys
from ..file.reader import FileReader
from ..redis.client import RedisClient
from ..redis.frames import encode_frame
from ..redis.wire import encode_fields
from .fields import JSON_OBJECT, BadFieldList, decode_field_list
from .headers import (
    CHANNEL_HEADER,
    FIELDS_HEADER,
    ID_HEADER,
    RECORDING_HEADERS,
    recorded_as,
    without_recording_headers,
)
from .pacing import Pacing
from .sending import send_in_order

__all__ = [
    "MessageRefused",
    "ReplayError",
    "ReplaySummary",
    "StartNeedsKey",
    "Target",
    "is_retry_copy",
    "replay_file",
]

#: Where messages go: stream entries, list elements (pushed at the tail) or channel messages.
Target = Literal["stream", "list", "channel"]
#: As fast as the server answers.
UNPACED = Pacing()


class ReplayError(TrioStreamsError):
    """A recording could not be replayed (the message says why and where)."""


class MessageRefused(ReplayError):
    """The server refused a message (the message names it and the server's error); nothing
    after it was published."""


class StartNeedsKey(ReplayError):
    """A start at a sequence number or a time was given without naming the one stream key it
    is in (a stream file numbers and stamps each key's messages on their own)."""

    def hint(self) -> str | None:
        return "name the stream key to start in with --key NAME"


@final
@dataclass
class ReplaySummary:
    """How far a replay got; updated as it goes."""

    published: int = 0
    #: Retry copies the framework had appended, left out (``retries=False``).
    retries_left_out: int = 0
    #: Per destination key, how many messages went there.
    per_key: dict[str, int] = field(default_factory=dict)
    #: The key a refused message was for (None: none was refused).
    refused_key: str | None = None
    #: What each key of ``per_key`` (and ``refused_key``) is: stream, list or channel.
    kinds: dict[str, Target] = field(default_factory=dict)
    first_timestamp_ms: int | None = None


def is_retry_copy(headers: Mapping[str, str]) -> bool:
    """Whether a recorded message is a retry copy the framework appended (its headers say)."""
    return RETRY_COUNT_HEADER in headers or RETRY_TARGET_HEADER in headers


def _destination(target: Target, message: Message, headers: Mapping[str, str]) -> str:
    """Where a message goes unless renamed: the channel it was recorded from for a channel
    message (a pattern's recording holds many, under one key), else its stream key."""
    if target == "channel":
        return headers.get(CHANNEL_HEADER, message.stream_key)
    return message.stream_key


def _command(
    target: Target,
    key: str,
    message: Message,
    payload: bytes,
    headers: Mapping[str, str],
    drop: frozenset[str],
) -> tuple[object, ...]:
    kept = without_recording_headers(headers, drop)
    if target == "stream":
        marker = headers.get(FIELDS_HEADER)
        if marker is not None and FIELDS_HEADER in drop:
            if marker == JSON_OBJECT:
                return ("XADD", key, "*", *_original_fields(payload, message))
            try:
                return ("XADD", key, "*", *decode_field_list(marker))
            except BadFieldList as exc:
                raise ReplayError(
                    f"message #{message.seq} of {message.stream_key!r} (at byte "
                    f"{message.offset}) keeps an entry's fields in {FIELDS_HEADER}, but they "
                    f"cannot be read back: {exc}"
                ) from None
        return ("XADD", key, "*", *encode_fields(payload, kept))
    value = encode_frame(payload, kept)
    return ("RPUSH", key, value) if target == "list" else ("PUBLISH", key, value)


def _original_fields(payload: bytes, message: Message) -> list[str]:
    try:
        fields = json.loads(payload)
    except ValueError:
        fields = None
    if not isinstance(fields, dict) or not fields:
        raise ReplayError(
            f"message #{message.seq} of {message.stream_key!r} says its payload holds an "
            f"entry's fields ({FIELDS_HEADER}: json), but it is not a JSON object of them"
        )
    return [str(part) for pair in fields.items() for part in pair]


async def replay_file(
    path: str | os.PathLike[str],
    client: RedisClient,
    *,
    keys: Collection[str] | None = None,
    rename: str | None = None,
    target: Target | None = None,
    start: Position | None = None,
    pacing: Pacing = UNPACED,
    keep: Collection[str] = (),
    id_header: str = ID_HEADER,
    limit: int | None = None,
    retries: bool = False,
    batch: int = 1000,
    on_batch: Callable[[ReplaySummary], None] = lambda summary: None,
    summary: ReplaySummary | None = None,
) -> ReplaySummary:
    """Publish the messages of the stream file at ``path`` to ``client``.

    ``keys`` picks stream keys (None: all); each goes to the Redis key of its name, or to
    ``rename``. ``target`` None sends each message back as what it was recorded from (its
    headers say: :func:`~.headers.recorded_as`), else all as ``target``. As channel messages,
    a message recorded from a channel goes back to that channel
    (:data:`~.headers.CHANNEL_HEADER`: a pattern's recording holds many), unless ``rename``
    names one for all. ``start`` seeks first
    (``Position.timestamp(ms)``: as recorded after ``ms``; a sequence or time needs exactly one
    key). ``keep`` names recording headers to send anyway; ``id_header`` is the one the
    recording kept entry ids in (``record --id-header``).

    A retry copy the framework appended while the recording was made (it carries
    ``x-ruststream-retry-count`` or ``x-trio-streams-retry-for``) is a copy of a message the
    recording already holds: it is left out, and counted in ``summary.retries_left_out``, unless
    ``retries`` is true. Sent back, a consumer group would run the failing message again for each
    copy as well as for the original.
    """
    summary = summary or ReplaySummary()
    drop = (RECORDING_HEADERS | {id_header}) - frozenset(keep)
    key_list = None if keys is None else list(keys)
    check_file_keys(path, key_list)
    with FileReader(path, keys=key_list) as reader:
        if start is not None:
            _seek_start(reader, path, start, key_list)
        began = trio.current_time()
        pending: list[tuple[object, ...]] = []
        pending_keys: list[tuple[str, Target, Message]] = []

        async def send() -> None:
            await _send(client, pending, pending_keys, summary, on_batch)

        index = 0
        first_ts: int | None = None
        while limit is None or index < limit:
            messages = reader.read_messages(batch)
            if not messages:
                if reader.at_eof or reader.eos is not None:
                    break
                continue
            for message in messages:
                if limit is not None and index >= limit:
                    break
                if first_ts is None:
                    first_ts = message.timestamp_ms
                if pacing.paced:
                    at = began + pacing.due(index, message.timestamp_ms, first_ts)
                    if at > trio.current_time():
                        await send()
                        await trio.sleep_until(at)
                payload, headers = open_envelope(message.payload)
                if not retries and is_retry_copy(headers):
                    summary.retries_left_out += 1
                    continue
                kind = target or recorded_as(headers)
                key = rename or _destination(kind, message, headers)
                pending.append(_command(kind, key, message, payload, headers, drop))
                pending_keys.append((key, kind, message))
                index += 1
                if len(pending) >= batch:
                    await send()
        # What was read before a damaged end goes out first; then the damage is the error.
        await send()
        reader.check_finished()
    return summary


def _seek_start(
    reader: FileReader, path: str | os.PathLike[str], start: Position, key_list: list[str] | None
) -> None:
    """Move ``reader`` to ``start``: a sequence number or a time needs exactly one key."""
    if start.kind in (PositionKind.SEQUENCE, PositionKind.TIMESTAMP):
        if not key_list or len(key_list) != 1:
            where = "seq" if start.kind is PositionKind.SEQUENCE else "ts"
            raise StartNeedsKey(
                f"{os.fspath(path)}: starting at {where}:{start.value} needs the one stream "
                f"key to start in ({'none' if not key_list else len(key_list)} given): each "
                "key of a stream file has its own sequence numbers and times"
            )
        reader.seek(start, key=key_list[0])
    elif start != Position.beginning():
        reader.seek(start)


async def _send(
    client: RedisClient,
    pending: list[tuple[object, ...]],
    pending_keys: list[tuple[str, Target, Message]],
    summary: ReplaySummary,
    on_batch: Callable[[ReplaySummary], None],
) -> None:
    """Send the pending commands in order and count what the server confirmed; the first one
    it refused stops the replay (:class:`MessageRefused`), counted up to it."""
    if not pending:
        return
    refusal = await send_in_order(client, pending)
    confirmed = len(pending) if refusal is None else refusal.index
    for key, kind, message in pending_keys[:confirmed]:
        summary.kinds[key] = kind
        summary.published += 1
        summary.per_key[key] = summary.per_key.get(key, 0) + 1
        if summary.first_timestamp_ms is None:
            summary.first_timestamp_ms = message.timestamp_ms
    if refusal is not None:
        key, kind, message = pending_keys[refusal.index]
        summary.refused_key = key
        summary.kinds[key] = kind
        on_batch(summary)
        raise MessageRefused(
            f"message #{message.seq} of {message.stream_key!r} (at byte "
            f"{message.offset}) was refused by {key!r}: {refusal.error}; nothing after "
            "it was published"
        )
    pending.clear()
    pending_keys.clear()
    on_batch(summary)
