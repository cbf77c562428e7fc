"""A group member's reclaim: entries idle past ``min_idle`` (a dead consumer's, or handed back
at another member's graceful stop) are claimed, and the reader takes them from this
consumer's own pending list.

A task runs ``XAUTOCLAIM ... JUSTID`` every second (more often for a short ``min_idle``); the
cursor is kept across passes. Entries deleted while pending are counted. What a dead holder
on this host had run is adopted from its journal first (:meth:`~.attempts.AttemptLedger.adopt`):
entries its handlers had finished are acknowledged, not run again. After a pass that reached
the end of the pending list, the hygiene pass runs when due (:mod:`.group_hygiene`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import trio

from .client.errors import RedisError
from .group_hygiene import GroupHygiene
from .group_member import GroupMember, nogroup
from .journal import RunJournal
from .wire import parse_autoclaim, text

__all__ = ["reclaim"]

_log = logging.getLogger("trio_streams.redis")

#: Seconds between reclaim passes: an entry handed back at a graceful stop (made idle at once)
#: is taken by another member within about this long.
_RECLAIM_EVERY = 1.0


async def reclaim(
    member: GroupMember, hygiene: GroupHygiene, taken: Callable[[list[str]], None]
) -> None:
    """Claim entries idle past ``min_idle``, then hand their ids to ``taken`` (the reader's).
    A failure is the fault ``reclaim`` (a vanished group is the reader's to recreate); the
    next pass starts over. Cancelled with the subscription: what was claimed and not yet
    read stays in this consumer's pending list."""
    host = member.host
    assert host is not None
    min_idle_ms = max(1, int(member.stream.min_idle * 1000))
    interval = min(member.stream.min_idle / 2, _RECLAIM_EVERY)
    cursor = "0-0"
    while True:
        if cursor == "0-0":
            await trio.sleep(interval)
        # Under the claim lock, a seek never sweeps this consumer's pending list between a
        # claim and the reader hearing of it (``taken``).
        async with member.claim_lock:
            try:
                reply = await member.client.execute(
                    "XAUTOCLAIM", member.key, member.group, member.consumer, min_idle_ms,
                    cursor, "COUNT", 100, "JUSTID",
                )  # fmt: skip
            except RedisError as exc:
                cursor = "0-0"
                if not nogroup(exc):
                    host.report_fault("reclaim", str(exc), error=exc)
                continue
            host.clear_fault("reclaim")
            cursor, claimed, deleted = parse_autoclaim(reply)
            if deleted:
                member.deleted_pending += len(deleted)
                _log.warning(
                    "%s: %d entries of stream %r were deleted while pending",
                    member.label, len(deleted), member.key,
                )  # fmt: skip
            ids = [c for c in map(text, claimed) if c not in member.held]
            if ids:
                ids = await _unfinished(member, ids)
            if ids:
                taken(ids)
        if cursor == "0-0":
            await hygiene.when_due()


async def _unfinished(member: GroupMember, ids: list[str]) -> list[str]:
    """``ids`` less those a dead holder on this host had finished (acknowledged by the
    ledger's adoption); the runs it recorded for the others are theirs now."""
    if member.ledger is None:
        return ids
    peers = await trio.to_thread.run_sync(RunJournal.peers, member.journal_group())
    finished = await member.ledger.adopt(ids, peers)
    return [c for c in ids if c not in finished]
