"""One shape for the replies the Redis transport reads, whichever protocol the connection speaks.

RESP3 and RESP2 carry the same data in different shapes: a map or a flat list of pairs
(``HGETALL``, ``XINFO``, ``XREAD``), a double or a bulk string (``ZSCORE``), score pairs nested
or flat (``WITHSCORES``, ``ZPOPMIN``). Each function here takes a reply as ``execute`` (or a
pipeline) returns it, from either protocol, and returns one typed shape, so code built on the
client never looks at :attr:`~.client.RedisClient.protocol`. They are pure: no I/O, no state.

Pub/Sub needs none of this: :class:`~.subscriber.Subscription` already yields the same
:class:`~.subscriber.Message` on both protocols.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from .errors import RedisProtocolError


class StreamEntry(NamedTuple):
    """One stream entry: its ID and its fields."""

    id: bytes
    #: Field to value (a field repeated in the entry keeps its last value). None for an entry
    #: deleted while still pending: ``XREADGROUP ... 0`` reports its ID alone.
    fields: dict[bytes, bytes] | None


class AutoClaim(NamedTuple):
    """``XAUTOCLAIM``: where the next scan starts (``0-0`` when done), the entries claimed
    (their IDs only with ``JUSTID``: :func:`autoclaim_ids`), and IDs found deleted (dropped
    from the pending list by the server)."""

    next_id: bytes
    entries: list[StreamEntry]
    deleted: list[bytes]


class PendingSummary(NamedTuple):
    """``XPENDING key group``: how many entries are pending, the smallest and largest pending
    ID (None when nothing is), and the count per consumer."""

    pending: int
    smallest: bytes | None
    largest: bytes | None
    consumers: dict[bytes, int]


class PendingEntry(NamedTuple):
    """One row of ``XPENDING key group [IDLE ms] start end count [consumer]``."""

    id: bytes
    consumer: bytes
    idle_ms: int
    deliveries: int


def _pairs(reply: Any) -> dict[Any, Any]:
    """A RESP3 map, or a RESP2 flat ``[key, value, ...]`` list, as a dict."""
    if isinstance(reply, dict):
        return reply
    if isinstance(reply, list) and len(reply) % 2 == 0:
        return dict(zip(reply[::2], reply[1::2], strict=True))
    raise RedisProtocolError(f"expected a map or a list of pairs, got {type(reply).__name__}")


def _text_keys(reply: Any) -> dict[str, Any]:
    return {(k.decode() if isinstance(k, bytes) else str(k)): v for k, v in _pairs(reply).items()}


def _entry(item: Sequence[Any]) -> StreamEntry:
    fields = item[1]
    if fields is None:
        return StreamEntry(item[0], None)
    return StreamEntry(item[0], dict(zip(fields[::2], fields[1::2], strict=True)))


def stream_entries(reply: Any) -> list[StreamEntry]:
    """``XRANGE``, ``XREVRANGE`` and ``XCLAIM`` (without ``JUSTID``)."""
    return [_entry(item) for item in reply or ()]


def stream_read(reply: Any) -> dict[bytes, list[StreamEntry]]:
    """``XREAD`` and ``XREADGROUP``: the entries of each stream that had any, in the order the
    streams were named; ``{}`` when the read timed out (``BLOCK``) or found nothing."""
    if reply is None:
        return {}
    streams = reply.items() if isinstance(reply, dict) else ((s[0], s[1]) for s in reply)
    return {stream: [_entry(item) for item in entries] for stream, entries in streams}


def autoclaim(reply: Any) -> AutoClaim:
    """``XAUTOCLAIM`` without ``JUSTID``."""
    deleted = list(reply[2]) if len(reply) > 2 else []
    return AutoClaim(reply[0], stream_entries(reply[1]), deleted)


def autoclaim_ids(reply: Any) -> tuple[bytes, list[bytes], list[bytes]]:
    """``XAUTOCLAIM ... JUSTID``: next start, IDs claimed, IDs found deleted."""
    deleted = list(reply[2]) if len(reply) > 2 else []
    return reply[0], list(reply[1]), deleted


def pending_summary(reply: Any) -> PendingSummary:
    """``XPENDING key group`` (the summary form)."""
    pending, smallest, largest, consumers = reply
    return PendingSummary(
        int(pending),
        smallest,
        largest,
        {name: int(pending) for name, pending in consumers or ()},
    )


def pending_entries(reply: Any) -> list[PendingEntry]:
    """``XPENDING key group [IDLE ms] start end count [consumer]`` (the extended form)."""
    return [PendingEntry(row[0], row[1], int(row[2]), int(row[3])) for row in reply]


def stream_info(reply: Any) -> dict[str, Any]:
    """``XINFO STREAM key [FULL]``: field names as str; entries as :class:`StreamEntry`; with
    ``FULL``, ``groups`` (and each group's ``consumers``) as dicts shaped the same way."""
    info = _text_keys(reply)
    for name in ("first-entry", "last-entry"):
        if name in info:
            info[name] = None if info[name] is None else _entry(info[name])
    if "entries" in info:
        info["entries"] = stream_entries(info["entries"])
    if isinstance(info.get("groups"), list):  # FULL; otherwise it is the number of groups
        info["groups"] = [_group(group) for group in info["groups"]]
    return info


def _group(reply: Any) -> dict[str, Any]:
    group = _text_keys(reply)
    if isinstance(group.get("consumers"), list):
        group["consumers"] = [_text_keys(consumer) for consumer in group["consumers"]]
    return group


def group_info(reply: Any) -> list[dict[str, Any]]:
    """``XINFO GROUPS key``: one dict per group, field names as str."""
    return [_text_keys(group) for group in reply]


def consumer_info(reply: Any) -> list[dict[str, Any]]:
    """``XINFO CONSUMERS key group``: one dict per consumer, field names as str."""
    return [_text_keys(consumer) for consumer in reply]


def hash_fields(reply: Any) -> dict[bytes, bytes]:
    """``HGETALL``: field to value (``{}`` for a missing key)."""
    return _pairs(reply)


def score(reply: Any) -> float | None:
    """``ZSCORE`` (and ``ZINCRBY``, ``ZADD ... INCR``): the score, None for a missing member."""
    return None if reply is None else float(reply)


def scored_members(reply: Any) -> list[tuple[bytes, float]]:
    """``ZRANGE``/``ZRANGEBYSCORE``/``ZREVRANGE`` ``WITHSCORES``, ``ZPOPMIN``/``ZPOPMAX``
    (with or without a count): ``(member, score)`` in the server's order."""
    if not reply:
        return []
    if isinstance(reply[0], list):  # RESP3 with several: [[member, score], ...]
        return [(member, float(value)) for member, value in reply]
    # RESP2, and RESP3 ZPOPMIN without a count: [member, score, member, score...]
    return [(reply[i], float(reply[i + 1])) for i in range(0, len(reply) - 1, 2)]


def list_pop(reply: Any) -> tuple[bytes, list[bytes]] | None:
    """``LMPOP`` / ``BLMPOP``: the key popped from and its elements; None when nothing was."""
    if reply is None:
        return None
    key, elements = reply
    return key, list(elements)


__all__ = [
    "AutoClaim",
    "PendingEntry",
    "PendingSummary",
    "StreamEntry",
    "autoclaim",
    "autoclaim_ids",
    "consumer_info",
    "group_info",
    "hash_fields",
    "list_pop",
    "pending_entries",
    "pending_summary",
    "score",
    "scored_members",
    "stream_entries",
    "stream_info",
    "stream_read",
]
