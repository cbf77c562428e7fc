"""Moving a consumer group on a Redis stream: ``XGROUP SETID``, with ``ENTRIESREAD`` so the
group's lag stays right.

Where a position puts the group (the group then delivers the first entry *after* its last
delivered id, which is what ``XGROUP SETID`` sets):

- ``Position.beginning()``: ``0-0``, so every entry of the stream is delivered to the group
  again (those pending stay pending).
- ``Position.end()``: the last id the stream gave out *now* (its ``last-generated-id``, not
  ``$``), so what the move counted is what it skipped; entries written after are delivered.
- ``Position.entry(id)``: the id just before ``id``, so that entry is delivered next, as a
  plain stream's ``Position.entry(id)`` reads it: the entry is included. An id past the
  stream's ``last-generated-id`` is refused
  (:class:`~trio_streams.core.group_moves.PositionRefused`): the group would pass over entries
  not written yet.
- ``Position.timestamp(ms)``: ``<ms>-<max>``, so the first entry strictly later than ``ms`` is
  next, as on a plain stream; an instant at or past the ``last-generated-id``'s is refused,
  as an id past it is (and as every transport's seek refuses an instant with nothing after).

What is checked is the ``last-generated-id``, the last entry written, deleted or not, not the
last entry the stream still holds: the server never writes an id up to it again, so a position
between the two passes over nothing (after ``XDEL`` of the tip, the deleted tip's id is taken).
- ``Position.sequence(n)``: refused, typed: Redis entries are addressed by id and time.

**Counting.** The entries between the group's last delivered id and the new one are counted
(a short server-side script per :data:`COUNT_CHUNK` entries, so nothing but numbers and two
ids crosses the wire): the skipped or replayed entries a move reports, and what a dry run
shows without moving anything.

**ENTRIESREAD** is ``entries-added`` (``XINFO STREAM``) less the entries the stream holds after
the new position: the group's lag is then exactly the entries left to deliver (``0`` at the
end, the stream's length at the beginning). Counting those costs the same scripts over the
entries after the position. Whether the server takes ``ENTRIESREAD`` is asked of the server
(:func:`entries_read_supported`, its ``COMMAND DOCS``), never read off a version string; a
server without it (or without ``entries-added``) is moved without it, and computes the lag
itself when it can.

**Live consumers** (:func:`live_consumers`): another consumer of the group is live if it holds
its name's lease (a trio-streams member, renewed every 2 s) or read from the group within
:data:`LIVE_IDLE_MS`. A handler's seek is refused while there is one, unless its subscription
says ``shared_seek=True``; a broker's or the CLI's move is not (it is the group-wide operation)
and reports the consumers it found.

Every command names the stream key, so on a cluster each goes to the stream's node (the
lease keys share the stream's slot).
"""

from __future__ import annotations

from typing import Any

from ..core.group_moves import GroupMove, GroupNotFound, PositionRefused
from ..core.positions import MAX_SEQUENCE, Position, PositionKind
from .client import RedisClient
from .client.errors import ReplyError
from .client.scripts import Script
from .keytypes import wrong_type_found
from .names import lease_key
from .streams import SEQUENCE_REFUSAL
from .wire import id_before, parse_consumers, split_id, text

__all__ = [
    "COUNT_CHUNK",
    "LIVE_IDLE_MS",
    "entries_read_supported",
    "live_consumers",
    "move_group",
    "refuse_position",
]

#: Entries one counting script looks at, at most (it returns two ids and a number).
COUNT_CHUNK = 10_000
#: A consumer that holds no lease but read from the group within this many ms is live.
LIVE_IDLE_MS = 10_000

#: Count the entries of a range, at most a chunk. KEYS: stream. ARGV: start (``(id``,
#: exclusive), end id (inclusive), most. Returns {count, first id, last id}.
_COUNT = Script(
    """
local found = redis.call('XRANGE', KEYS[1], ARGV[1], ARGV[2], 'COUNT', ARGV[3])
local n = #found
if n == 0 then return {0, false, false} end
return {n, found[1][1], found[n][1]}
""",
    purpose="count the entries of a stream range",
)


def refuse_position(position: Position, key: str) -> None:
    """Refuse, typed, a position no group of stream ``key`` can be moved to whatever it holds:
    a sequence number, or a position naming another stream."""
    if position.kind is PositionKind.SEQUENCE:
        raise PositionRefused(f"stream {key!r}: {position!r} {SEQUENCE_REFUSAL}")
    if position.stream is not None and position.stream != key:
        raise PositionRefused(f"{position!r} names stream {position.stream!r}, not {key!r}")


async def entries_read_supported(client: RedisClient) -> bool:
    """Whether the server's ``XGROUP SETID`` takes ``ENTRIESREAD`` (Redis 7.0 and later), as
    its command table says (:meth:`~.client.RedisClient.server_commands`); a server whose
    table cannot be read is taken not to."""
    try:
        commands = await client.server_commands()
    except ReplyError:
        return False
    return commands.takes("xgroup|setid", "ENTRIESREAD")


async def live_consumers(
    client: RedisClient, key: str, group: str, *, besides: str = ""
) -> list[str]:
    """The consumers of ``group`` other than ``besides`` that are live (see the module
    docstring): a lease held, or a read within :data:`LIVE_IDLE_MS`."""
    reply = await client.execute("XINFO", "CONSUMERS", key, group)
    others = [(name, idle) for name, _, idle in parse_consumers(reply) if name != besides]
    if not others:
        return []
    pipeline = client.pipeline()
    for name, _ in others:
        pipeline.add("EXISTS", lease_key(key, group, name))
    leases = await pipeline.execute(raise_on_error=True)
    return [
        name
        for (name, idle), leased in zip(others, leases, strict=True)
        if leased or idle < LIVE_IDLE_MS
    ]


def _fields(item: Any) -> dict[str, Any]:
    if isinstance(item, list):
        item = dict(zip(item[::2], item[1::2], strict=False))
    return {text(k): v for k, v in item.items()}


def _id(value: Any) -> tuple[int, int]:
    return split_id(text(value))


async def _look(client: RedisClient, key: str, group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """``XINFO STREAM`` and the group's ``XINFO GROUPS`` fields; :class:`GroupNotFound` if
    either is missing."""
    try:
        stream = _fields(await client.execute("XINFO", "STREAM", key))
        groups = [_fields(g) for g in await client.execute("XINFO", "GROUPS", key)]
    except ReplyError as exc:
        if exc.code == "WRONGTYPE":
            raise await wrong_type_found(
                client, key, "stream", label=f"group {group!r}",
                role=f"as the stream of consumer group {group!r}",
            ) from exc  # fmt: skip
        if "no such key" in exc.message.lower():
            raise GroupNotFound(
                f"stream {key!r} does not exist, so it has no consumer group {group!r}"
            ) from None
        raise
    for found in groups:
        if text(found.get("name", b"")) == group:
            return stream, found
    names = ", ".join(repr(text(g.get("name", b""))) for g in groups) or "none"
    raise GroupNotFound(f"stream {key!r} has no consumer group {group!r} (its groups: {names})")


def _target(position: Position, key: str, tip: str) -> str:
    """The last delivered id that puts the group at ``position`` (see the module docstring)."""
    kind = position.kind
    if kind is PositionKind.BEGINNING:
        return "0-0"
    if kind is PositionKind.END:
        return tip
    if kind is PositionKind.ENTRY:
        if split_id(position.entry_id) > split_id(tip):
            raise PositionRefused(
                f"entry {position.entry_id} is past the last id stream {key!r} gave out "
                f"({tip}, deleted or not): the group would pass over entries not written yet"
            )
        return id_before(position.entry_id)
    assert kind is PositionKind.TIMESTAMP and position.value is not None
    target = f"{position.value}-{MAX_SEQUENCE}"
    if split_id(target) >= split_id(tip):
        raise PositionRefused(
            f"stream {key!r} has written no entry later than {position.value} ms (the last "
            f"id it gave out is {tip}): the group would pass over entries not written yet"
        )
    return target


async def count_range(
    client: RedisClient, key: str, after: str, upto: str
) -> tuple[int, str | None, str | None]:
    """The entries of ``key`` with ids in ``(after, upto]``: how many, the first and the last
    id (None, None when there are none); one script per :data:`COUNT_CHUNK` entries."""
    total, first, last = 0, None, None
    if split_id(upto) <= split_id(after):
        return total, first, last
    start = f"({after}"
    while True:
        reply = await client.execute("EVAL", _COUNT, 1, key, start, upto, COUNT_CHUNK)
        found = int(reply[0])
        if not found:
            break
        total += found
        if first is None:
            first = text(reply[1])
        last = text(reply[2])
        if found < COUNT_CHUNK:
            break
        start = f"({last}"
    return total, first, last


async def _entries_read(
    client: RedisClient, key: str, stream: dict[str, Any], target: str, tip: str
) -> int | None:
    """What ``ENTRIESREAD`` is set to so that the lag is the entries after ``target`` (None:
    the server keeps no ``entries-added``)."""
    added = stream.get("entries-added")
    if not isinstance(added, int):
        return None
    length = int(stream.get("length", 0))
    first_entry = stream.get("first-entry")
    if split_id(target) >= split_id(tip):
        after = 0
    elif not first_entry or split_id(target) < _id(first_entry[0]):
        after = length
    else:
        after, _, _ = await count_range(client, key, target, tip)
    return max(0, added - after)


async def move_group(
    client: RedisClient, key: str, group: str, position: Position, *, dry_run: bool = False
) -> GroupMove:
    """Move ``group`` of stream ``key`` to ``position`` (see the module docstring), or with
    ``dry_run`` only say what the move would skip or replay.

    Raises :class:`~trio_streams.core.group_moves.GroupNotFound` (the stream or the group is
    missing), :class:`~trio_streams.core.group_moves.PositionRefused` (a position the stream
    cannot take), a Redis error as itself. Cancelled before the ``XGROUP SETID`` is sent,
    nothing has moved; after, the group has moved.
    """
    refuse_position(position, key)
    stream, info = await _look(client, key, group)
    tip = text(stream.get("last-generated-id", b"0-0"))
    was = text(info.get("last-delivered-id", b"0-0"))
    target = _target(position, key, tip)
    skipped = replayed = 0
    if split_id(target) >= split_id(was):
        skipped, first, last = await count_range(client, key, was, target)
    else:
        replayed, first, last = await count_range(client, key, target, was)
    supported = await entries_read_supported(client)
    entries_read = await _entries_read(client, key, stream, target, tip) if supported else None
    consumers = tuple(
        name
        for name, _, _ in parse_consumers(await client.execute("XINFO", "CONSUMERS", key, group))
    )
    if not dry_run:
        read = () if entries_read is None else ("ENTRIESREAD", entries_read)
        try:
            await client.execute("XGROUP", "SETID", key, group, target, *read)
        except ReplyError as exc:
            if exc.code == "NOGROUP":
                raise GroupNotFound(
                    f"stream {key!r} has no consumer group {group!r} (it vanished)"
                ) from exc
            raise
    return GroupMove(
        stream=key,
        group=group,
        was=was,
        now=target,
        skipped=skipped,
        replayed=replayed,
        first=first,
        last=last,
        entries_read=entries_read,
        pending=int(info.get("pending", 0)),
        consumers=consumers,
        moved=not dry_run,
    )
