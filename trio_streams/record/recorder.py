"""Copying a Redis stream, list or channel into a stream file.

The reads are the plain ones, so a recording never joins or disturbs a consumer group: a
stream's backlog is read with ``XRANGE`` a page at a time (``COUNT 1000``), and ``--follow``
goes on with ``XREAD BLOCK`` from the last id read, on a dedicated connection. Nothing here
sends ``XREADGROUP``, ``XACK``, ``XCLAIM`` or ``XGROUP``: the groups' pending lists, delivery
counts, consumers and idle times stay exactly as they were.

Each entry becomes one message of the file's stream key: the payload and headers are sealed in
the file's envelope, the entry's time (its id's milliseconds) is the message's timestamp, and
its id goes in the header :data:`~.headers.ID_HEADER`. A page is flushed when it is written, so
a follower of the file sees it at once. A recording without ``--follow`` and without
``--until`` ends at the entry that was last when it started, so a busy producer cannot keep it
going forever.

A list is recorded without taking anything from it: one ``LRANGE 0 -1`` (a consistent
snapshot; it holds the whole list in memory once), head first. A channel (or pattern) is
recorded while subscribed: what is published before the subscription or during a reconnect is
not there (each gap is counted and reported), as for any Pub/Sub subscriber.

Cancellation: every function may be cancelled at any await; what was written before is whole
(a page is written between two awaits), and the caller closes the writer. The summary passed
in says how far it got.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import final

import trio

from ..core.errors import TrioStreamsError
from ..core.groups import open_nursery
from ..file.envelope import seal
from ..file.format import key_is_valid
from ..file.writer import StreamWriter
from ..redis.client import Backoff, RedisClient, RedisConnectionError
from ..redis.client.errors import ReadOnlyError
from ..redis.client.subscriber import Gap
from ..redis.dedicated import DedicatedConnection
from ..redis.frames import decode_frame
from ..redis.wire import (
    Entry,
    decode_fields,
    id_before,
    parse_entries,
    parse_read,
    text,
)
from .bounds import StreamBounds
from .fields import exact_fields
from .headers import CHANNEL_HEADER, FIELDS_HEADER, ID_HEADER, LIST_HEADER, add_header

__all__ = [
    "InvalidFileKey",
    "RecordSummary",
    "check_file_key",
    "pattern_file_key",
    "record_channel",
    "record_list",
    "record_stream",
]

#: The whole stream.
WHOLE = StreamBounds("-", "+")
#: Entries per ``XRANGE`` / ``XREAD`` call.
PAGE = 1000
#: How long one ``XREAD BLOCK`` waits (ms) before asking again.
BLOCK_MS = 1000


class InvalidFileKey(TrioStreamsError):
    """The Redis key cannot be a stream file's stream key (letters, digits, ``.``, ``_``, ``-``,
    at most 249 bytes): the message names it."""

    def hint(self) -> str | None:
        return "name the file's stream key with --key NAME"


def check_file_key(key: str, source: str) -> str:
    """``key`` if a stream file can hold it, else :class:`InvalidFileKey` naming ``source``."""
    if not key or not key_is_valid(key.encode("utf-8", "surrogateescape")):
        raise InvalidFileKey(
            f"{source} cannot be the stream file's key {key!r}: a file's stream keys are "
            "letters, digits, '.', '_' and '-' (at most 249 bytes)"
        )
    return key


#: A run of characters a stream file's key cannot hold.
_NOT_IN_A_FILE_KEY = re.compile(r"[^A-Za-z0-9._-]+")


def pattern_file_key(pattern: str) -> str:
    """The file's stream key for a recording of ``pattern`` given no ``--key``: the pattern with
    each run of characters a file key cannot hold (the glob's ``*``, ``?``, ``[``...) made one
    ``_`` (``news.*`` is kept under ``news._``). A pattern names no one channel, and each
    message keeps its own in :data:`~.headers.CHANNEL_HEADER`."""
    return _NOT_IN_A_FILE_KEY.sub("_", pattern)


@final
@dataclass
class RecordSummary:
    """How far a recording got; updated as it goes, so it is right even after a cancellation."""

    #: What was recorded (``stream 'orders'``, ``list 'jobs'``, ``channel 'news'``).
    source: str
    #: The file's stream key the messages went to.
    key: str
    entries: int = 0
    first_seq: int | None = None
    last_seq: int | None = None
    first_id: str | None = None
    last_id: str | None = None
    #: The backlog's size when it is known in advance (a whole stream or a list).
    backlog_total: int | None = None
    #: The backlog was read to its end (for ``--follow``: the recording went live).
    backlog_done: bool = False
    #: Reading new entries as they come (``--follow``, a channel).
    live: bool = False
    #: Pub/Sub reconnects: stretches of time whose messages are not in the file.
    gaps: int = 0
    #: Stopped because ``limit`` entries were recorded.
    limit_reached: bool = False
    #: Entries recorded at each page, with the Trio time: for a live rate.
    marks: list[tuple[float, int]] = field(default_factory=list)

    def wrote(self, seq: int, entry_id: str | None) -> None:
        if self.first_seq is None:
            self.first_seq = seq
            self.first_id = entry_id
        self.last_seq = seq
        if entry_id is not None:
            self.last_id = entry_id
        self.entries += 1


#: Called after each page is written and flushed.
OnPage = Callable[[RecordSummary], None]


def _nothing(summary: RecordSummary) -> None:
    pass


def _page_done(writer: StreamWriter, summary: RecordSummary, on_page: OnPage) -> None:
    writer.flush()
    summary.marks.append((trio.current_time(), summary.entries))
    del summary.marks[:-64]
    on_page(summary)


def _write_entry(
    writer: StreamWriter, key: str, entry: Entry, summary: RecordSummary, id_header: str | None
) -> None:
    fields = entry.fields
    if fields is None:  # only XREADGROUP of a deleted pending entry answers this
        return
    payload, headers = decode_fields(fields)
    exact = exact_fields(fields, payload, headers)
    if exact is not None:  # another producer's layout: keep its fields byte for byte
        add_header(headers, FIELDS_HEADER, exact, f"entry {entry.id}")
    if id_header is not None:
        add_header(headers, id_header, entry.id, f"entry {entry.id}")
    ms = int(entry.id.partition("-")[0])
    data = seal(payload, headers)
    seq, _, _ = writer.append(key, data, ms)
    summary.wrote(seq, entry.id)


async def record_stream(
    client: RedisClient,
    stream: str,
    writer: StreamWriter,
    *,
    key: str | None = None,
    bounds: StreamBounds = WHOLE,
    follow: bool = False,
    limit: int | None = None,
    id_header: str | None = ID_HEADER,
    page: int = PAGE,
    block_ms: int = BLOCK_MS,
    on_page: OnPage = _nothing,
    on_fault: Callable[[str], None] = lambda text: None,
    summary: RecordSummary | None = None,
) -> RecordSummary:
    """Copy the entries of ``stream`` within ``bounds`` into ``writer`` under ``key`` (default:
    the stream's name); with ``follow``, go on with new entries until cancelled.

    ``limit`` stops after that many entries. ``id_header`` (None: none) names the header that
    keeps each entry's id. ``on_fault`` hears of a lost connection while following (the
    recording reconnects and resumes after the last id it wrote: nothing is missed).
    """
    file_key = check_file_key(stream if key is None else key, f"the stream {stream!r}")
    summary = summary or RecordSummary(f"stream {stream!r}", file_key)
    last = await _last_id(client, stream)
    if bounds.start is None:  # --from end: only what comes next
        after = last or "0-0"
        summary.backlog_done = True
        on_page(summary)
    else:
        if bounds.start == "-" and bounds.end == "+":
            summary.backlog_total = int(await client.execute("XLEN", stream))
        if last is None and not follow:  # an empty (or missing) stream: nothing to record
            summary.backlog_done = True
            on_page(summary)
            return summary
        # Without --follow the backlog ends where the stream ended when the recording began.
        end = bounds.end if follow or bounds.end != "+" or last is None else last
        until = await _backlog(
            client, stream, writer, file_key, bounds.start, end, summary, limit,
            id_header, page, on_page,
        )  # fmt: skip
        summary.backlog_done = True
        on_page(summary)
        if until is None or not follow or _full(summary, limit):
            return summary
        after = until
    await _follow(
        client, stream, writer, file_key, after, summary, limit, id_header, page, block_ms,
        on_page, on_fault,
    )  # fmt: skip
    return summary


def _full(summary: RecordSummary, limit: int | None) -> bool:
    if limit is not None and summary.entries >= limit:
        summary.limit_reached = True
        return True
    return False


async def _last_id(client: RedisClient, stream: str) -> str | None:
    newest = parse_entries(await client.execute("XREVRANGE", stream, "+", "-", "COUNT", 1))
    return newest[0].id if newest else None


async def _backlog(
    client: RedisClient,
    stream: str,
    writer: StreamWriter,
    key: str,
    start: str,
    end: str,
    summary: RecordSummary,
    limit: int | None,
    id_header: str | None,
    page: int,
    on_page: OnPage,
) -> str | None:
    """XRANGE pages from ``start`` to ``end``; the id to follow after (None: stop here).

    The next page is read while this one is written (a channel of one page between the two
    tasks), so the server and the file work at the same time; at most three pages are held."""
    wanted = None if limit is None else limit - summary.entries
    send, receive = trio.open_memory_channel[list[Entry]](1)
    after = "0-0" if start == "-" else id_before(start)
    async with open_nursery() as nursery:
        nursery.start_soon(_read_pages, client, stream, start, end, page, wanted, send)
        async with receive:
            async for entries in receive:
                for entry in entries:
                    _write_entry(writer, key, entry, summary, id_header)
                after = entries[-1].id
                _page_done(writer, summary, on_page)
    return None if _full(summary, limit) else after


async def _read_pages(
    client: RedisClient,
    stream: str,
    low: str,
    end: str,
    page: int,
    wanted: int | None,
    send: trio.MemorySendChannel[list[Entry]],
) -> None:
    """Send the pages of ``XRANGE stream low end`` (at most ``wanted`` entries) to ``send``."""
    async with send:
        while wanted is None or wanted > 0:
            count = page if wanted is None else min(page, wanted)
            entries = parse_entries(
                await client.execute("XRANGE", stream, low, end, "COUNT", count)
            )
            if entries:
                await send.send(entries)
                low = f"({entries[-1].id}"
                if wanted is not None:
                    wanted -= len(entries)
            if len(entries) < count:
                return


async def _follow(
    client: RedisClient,
    stream: str,
    writer: StreamWriter,
    key: str,
    after: str,
    summary: RecordSummary,
    limit: int | None,
    id_header: str | None,
    page: int,
    block_ms: int,
    on_page: OnPage,
    on_fault: Callable[[str], None],
) -> None:
    summary.live = True
    dedicated = DedicatedConnection(client, stream)
    backoff = Backoff(0.05, 2.0)
    try:
        while not _full(summary, limit):
            count = page if limit is None else min(page, limit - summary.entries)
            try:
                conn, _ = await dedicated.get()
                reply = await conn.execute(
                    "XREAD", "COUNT", count, "BLOCK", block_ms, "STREAMS", stream, after
                )
            except (RedisConnectionError, ReadOnlyError) as exc:
                on_fault(f"connection lost while following {stream!r}: {exc}; reconnecting")
                await dedicated.drop(exc)
                await trio.sleep(backoff.failed())  # paced
                continue
            backoff.succeeded()
            found = parse_read(reply).get(stream)
            if found:
                for entry in found:
                    _write_entry(writer, key, entry, summary, id_header)
                after = found[-1].id
                _page_done(writer, summary, on_page)
            else:
                on_page(summary)  # a quiet second: the live rate falls
    finally:
        await dedicated.drop(None)


async def record_list(
    client: RedisClient,
    list_key: str,
    writer: StreamWriter,
    *,
    key: str | None = None,
    limit: int | None = None,
    on_page: OnPage = _nothing,
    summary: RecordSummary | None = None,
) -> RecordSummary:
    """Copy the elements of the list ``list_key``, head (index 0) first, without removing any.

    One ``LRANGE 0 -1`` reads a consistent snapshot. Each element's frame is opened into its
    payload and headers, and :data:`~.headers.LIST_HEADER` names the list (a replay pushes it
    back to a list); the messages' timestamp is the time of the snapshot.
    """
    file_key = check_file_key(list_key if key is None else key, f"the list {list_key!r}")
    summary = summary or RecordSummary(f"list {list_key!r}", file_key)
    stop = -1 if limit is None else limit - 1
    values = await client.execute("LRANGE", list_key, 0, stop)
    summary.backlog_total = len(values)
    on_page(summary)
    stamp = time.time_ns() // 1_000_000
    for n, value in enumerate(values):
        payload, headers = decode_frame(bytes(value))
        add_header(headers, LIST_HEADER, list_key, f"element {n} of {list_key!r}")
        seq, _, _ = writer.append(file_key, seal(payload, headers), stamp)
        summary.wrote(seq, None)
        if n % PAGE == PAGE - 1:
            _page_done(writer, summary, on_page)
            await trio.lowlevel.checkpoint()
    summary.backlog_done = True
    summary.limit_reached = limit is not None and summary.entries >= limit
    _page_done(writer, summary, on_page)
    return summary


async def record_channel(
    client: RedisClient,
    channel: str,
    writer: StreamWriter,
    *,
    pattern: bool = False,
    key: str | None = None,
    limit: int | None = None,
    on_page: OnPage = _nothing,
    on_fault: Callable[[str], None] = lambda text: None,
    on_subscribed: Callable[[], None] = lambda: None,
    summary: RecordSummary | None = None,
) -> RecordSummary:
    """Record what is published on ``channel`` (a pattern with ``pattern``) until cancelled or
    ``limit`` messages; each message's timestamp is when it arrived, its channel in
    :data:`~.headers.CHANNEL_HEADER`. Without ``key``, the file's key is the channel's name (a
    pattern's: :func:`pattern_file_key`). ``on_subscribed`` is called once the server confirmed
    the subscription (from then on nothing published is missed, but for reported gaps)."""
    what = "pattern" if pattern else "channel"
    if key is None:
        key = pattern_file_key(channel) if pattern else channel
    file_key = check_file_key(key, f"the {what} {channel!r}")
    summary = summary or RecordSummary(f"{what} {channel!r}", file_key)
    summary.backlog_done = summary.live = True
    subscription = client.subscribe(patterns=[channel]) if pattern else client.subscribe([channel])
    async with subscription as messages:
        on_subscribed()
        on_page(summary)
        async for item in messages:
            if isinstance(item, Gap):
                summary.gaps += 1
                on_fault(
                    f"{what} {channel!r}: deaf for {item.resumed_at - item.lost_at:.3f} s "
                    f"({item.error}); messages published then are not recorded"
                )
                continue
            payload, headers = decode_frame(item.data)
            add_header(headers, CHANNEL_HEADER, text(item.channel), f"a message on {channel!r}")
            seq, _, _ = writer.append(file_key, seal(payload, headers))
            summary.wrote(seq, None)
            _page_done(writer, summary, on_page)
            if _full(summary, limit):
                break
    return summary
