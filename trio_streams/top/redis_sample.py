"""One read-only snapshot of a Redis deployment's streams, for ``trio-streams top``.

Per stream: ``XINFO STREAM`` (length, entries added since the stream was made, the last
entry), ``XINFO GROUPS`` (per group: pending, entries read, lag) and ``XINFO CONSUMERS`` (per
consumer: pending, idle), and the stream's delay ZSET (:func:`~trio_streams.redis.delays.
delay_key`: how many delayed retries wait, how many are due by the server's clock). Nothing is
written and no group is joined, so a stream written and consumed by any other framework shows
the same way.

A stream is a dead-letter stream when its newest entry carries the header
``x-dead-letter-stream`` (what trio-streams writes on every dead letter; the value names the
stream it came from), or when its name matches a ``--dead-letter`` glob (other frameworks'
conventions, e.g. ``*.dlq``).

Streams are found with ``SCAN ... TYPE stream`` on every primary (a cluster's too), or named.
``entries-added`` and ``entries-read`` need Redis 7; on an older server those figures are
missing (None) and the rows say ``-``.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, final

from ..redis.client import RedisClient, RedisCluster, shapes
from ..redis.client.errors import ReplyError
from ..redis.delays import delay_key
from ..redis.wire import HEADER_PREFIX, quiet_ms, text

__all__ = [
    "DEAD_LETTER_FIELD",
    "ConsumerSample",
    "GroupSample",
    "RedisSnapshot",
    "StreamSample",
    "find_streams",
    "sample_redis",
]

#: The field of a dead letter's entry that names the stream it came from.
DEAD_LETTER_FIELD = (HEADER_PREFIX + "x-dead-letter-stream").encode()
#: Streams found by SCAN at most (a snapshot of a huge keyspace stays bounded).
MAX_STREAMS = 1000


@final
@dataclass(frozen=True, slots=True)
class ConsumerSample:
    name: str
    pending: int
    #: Milliseconds since it last read or claimed an entry (:func:`~..redis.wire.quiet_ms`:
    #: ``inactive`` where the server has it, else ``idle``; the same meaning on every server).
    idle_ms: int


@final
@dataclass(frozen=True, slots=True)
class GroupSample:
    name: str
    pending: int
    #: Entries the group has read (``entries-read``, Redis 7); None when unknown.
    entries_read: int | None
    #: Entries not yet delivered to the group (``lag``, Redis 7); None when unknown.
    lag: int | None
    last_delivered_id: str
    consumers: tuple[ConsumerSample, ...]


@final
@dataclass(frozen=True, slots=True)
class StreamSample:
    key: str
    length: int
    #: Every entry ever added (``entries-added``, Redis 7); None when unknown.
    entries_added: int | None
    last_id: str
    groups: tuple[GroupSample, ...]
    #: The stream this one holds dead letters of ("" when the origin is unknown), or None.
    dead_letter_of: str | None
    delayed: int
    delayed_due: int


@final
@dataclass(frozen=True, slots=True)
class RedisSnapshot:
    """Streams by key, taken at ``at`` (Trio's clock, seconds)."""

    at: float
    streams: dict[str, StreamSample]


async def find_streams(client: RedisClient, match: str = "*") -> list[str]:
    """The stream keys matching the glob ``match`` on every primary (at most MAX_STREAMS)."""
    keys, _ = await scan_streams(client, match)
    return keys


async def scan_streams(client: RedisClient, match: str = "*") -> tuple[list[str], bool]:
    """The first MAX_STREAMS stream keys (by name) matching ``match`` on every primary, and
    whether there were more (SCAN goes one key past the limit to know)."""
    return await scan_keys(client, match, "stream")


async def scan_keys(client: RedisClient, match: str, kind: str) -> tuple[list[str], bool]:
    """The first MAX_STREAMS keys of type ``kind`` (by name) matching ``match`` on every
    primary, and whether there were more."""
    found: set[str] = set()
    if isinstance(client, RedisCluster):
        await client.refresh_slots()
        nodes: Sequence[Any] = client.primaries
    else:
        nodes = [None]
    for node in nodes:
        cursor = b"0"
        while len(found) <= MAX_STREAMS:
            args = ("SCAN", cursor, "MATCH", match, "COUNT", 1000, "TYPE", kind)
            if node is None:
                reply = await client.execute(*args)
            else:
                assert isinstance(client, RedisCluster)
                reply = await client.execute_on(node, *args)
            cursor, keys = reply[0], reply[1]
            found.update(text(k) for k in keys)
            if cursor in (b"0", "0", 0):
                break
    return sorted(found)[:MAX_STREAMS], len(found) > MAX_STREAMS


def _dead_letter_of(key: str, last: shapes.StreamEntry | None, globs: Sequence[str]) -> str | None:
    if last is not None and last.fields is not None and DEAD_LETTER_FIELD in last.fields:
        return text(last.fields[DEAD_LETTER_FIELD])
    if any(fnmatch.fnmatchcase(key, glob) for glob in globs):
        return ""
    return None


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


async def sample_redis(
    client: RedisClient,
    keys: Sequence[str],
    *,
    now: float,
    dead_letter_globs: Sequence[str] = (),
) -> RedisSnapshot:
    """A snapshot of the streams ``keys`` (a key that vanished since it was found is left out).

    ``now`` is the snapshot's time (Trio's clock): rates divide by the difference of two."""
    server_time = await client.execute("TIME")
    now_ms = int(server_time[0]) * 1000 + int(server_time[1]) // 1000
    first = client.pipeline()
    for key in keys:
        first.add("XINFO", "STREAM", key)
        first.add("XINFO", "GROUPS", key)
        first.add("ZCARD", delay_key(key))
        first.add("ZCOUNT", delay_key(key), "-inf", now_ms)
    replies = await first.execute()
    infos: dict[str, tuple[dict[str, Any], list[dict[str, Any]], int, int]] = {}
    for n, key in enumerate(keys):
        info, groups, delayed, due = replies[4 * n : 4 * n + 4]
        if isinstance(info, ReplyError) or isinstance(groups, ReplyError):
            continue  # gone (or no longer a stream) since SCAN found it
        for reply in (delayed, due):
            if isinstance(reply, Exception):
                raise reply
        infos[key] = (shapes.stream_info(info), shapes.group_info(groups), int(delayed), int(due))
    second = client.pipeline()
    wanted: list[tuple[str, str]] = []
    for key, (_, groups, _, _) in infos.items():
        for group in groups:
            name = text(group["name"])
            wanted.append((key, name))
            second.add("XINFO", "CONSUMERS", key, name)
    consumer_replies = await second.execute() if wanted else []
    consumers: dict[tuple[str, str], tuple[ConsumerSample, ...]] = {}
    for (key, name), reply in zip(wanted, consumer_replies, strict=True):
        if isinstance(reply, ReplyError):
            consumers[(key, name)] = ()
            continue
        consumers[(key, name)] = tuple(
            ConsumerSample(text(c["name"]), int(c["pending"]), quiet_ms(c))
            for c in shapes.consumer_info(reply)
        )
    streams: dict[str, StreamSample] = {}
    for key, (info, groups, delayed, due) in infos.items():
        streams[key] = StreamSample(
            key=key,
            length=int(info["length"]),
            entries_added=_int(info.get("entries-added")),
            last_id=text(info["last-generated-id"]),
            groups=tuple(
                GroupSample(
                    name=text(group["name"]),
                    pending=int(group["pending"]),
                    entries_read=_int(group.get("entries-read")),
                    lag=_int(group.get("lag")),
                    last_delivered_id=text(group["last-delivered-id"]),
                    consumers=consumers.get((key, text(group["name"])), ()),
                )
                for group in groups
            ),
            dead_letter_of=_dead_letter_of(key, info.get("last-entry"), dead_letter_globs),
            delayed=delayed,
            delayed_due=due,
        )
    return RedisSnapshot(now, streams)
