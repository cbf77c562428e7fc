"""A group member's leases: what it holds is renewed while it runs, and handed back at a stop.

- **Leases.** While the subscription holds an entry (queued, in a handler, waiting out a delay,
  or acknowledged but not yet flushed) a task renews it with ``XCLAIM ... JUSTID`` every third
  of ``min_idle``, so no other consumer claims a message that is still being handled. Renewal
  stops at the flush or when the core lets the delivery go.
- **A graceful stop hands back.** After the drain and the last flush, what this consumer still
  has pending (read and never handled, or abandoned) is made claimable at once (``XCLAIM ...
  IDLE``, its count untouched): a restart under the name reads it at open, any other member's
  next reclaim pass (every second) takes it.
"""

from __future__ import annotations

import logging

import trio

from ..core.reporting import with_cause
from .client.errors import RedisError
from .group_member import CHUNK, GroupMember
from .wire import parse_pending

__all__ = ["hand_back", "renew_leases"]

_log = logging.getLogger("trio_streams.redis")

#: The idle time a graceful stop gives what it hands back (ms): past any ``min_idle``.
_HANDED_BACK_IDLE_MS = 10 * 365 * 86_400_000
#: Pending entries a graceful stop looks at to hand back, at most.
_HAND_BACK_MOST = 100_000


async def renew_leases(member: GroupMember) -> None:
    """Keep held entries fresh so no other consumer claims them (see the module docstring);
    a failure is the fault ``lease``, tried again at the next renewal.

    Cancelled with the subscription's tasks: renewal stops, and what is still held stays
    pending for this consumer's next start or another consumer's reclaim."""
    host = member.host
    assert host is not None
    interval = member.stream.min_idle / 3
    while True:
        await trio.sleep(interval)
        ids = list(member.held)
        if not ids:
            continue
        try:
            for i in range(0, len(ids), CHUNK):
                await member.client.execute(
                    "XCLAIM", member.key, member.group, member.consumer, 0,
                    *ids[i : i + CHUNK], "JUSTID",
                )  # fmt: skip
        except RedisError as exc:
            host.report_fault("lease", f"renewing {len(ids)} entries: {exc}", error=exc)
        else:
            host.clear_fault("lease")


async def hand_back(member: GroupMember) -> None:
    """What this consumer still has pending after its last flush (read and never handed to
    a handler, a read a stop cut short, deliveries abandoned at the drain's end) is made
    claimable at once: ``XCLAIM ... IDLE`` far past any ``min_idle``, ``JUSTID`` so its
    delivery count stays as it was, and the attempt ledger untouched (a run under way when
    the drain gave up counts; a read does not). The next member's reclaim pass takes it,
    or this consumer's name at its next open. A failure is logged: the entries stay pending
    and are reclaimed after ``min_idle``, as after a crash."""
    client, key, group, consumer = member.client, member.key, member.group, member.consumer
    try:
        start = "-"
        handed = 0
        while handed < _HAND_BACK_MOST:
            reply = await client.execute("XPENDING", key, group, start, "+", CHUNK, consumer)
            ids = list(parse_pending(reply))
            if not ids:
                break
            await client.execute(
                "XCLAIM", key, group, consumer, 0, *ids,
                "IDLE", _HANDED_BACK_IDLE_MS, "JUSTID",
            )  # fmt: skip
            handed += len(ids)
            if len(ids) < CHUNK:
                break
            start = "(" + ids[-1]
    except RedisError as exc:
        _log.warning(
            "%s: could not hand back the pending entries of consumer %r (they are reclaimed "
            "after min_idle): %s", member.label, consumer, with_cause(exc),
        )  # fmt: skip
        return
    if handed:
        _log.info(
            "%s: handed back %d entries read but not handled (claimable at once)",
            member.label, handed,
        )  # fmt: skip
