"""A group member's hygiene: consumers of the group gone quiet are removed, and ledger fields
of entries no longer pending (a crash between an acknowledgement and its field's removal) are
swept.

**The rule.** Another consumer of the group is removed (``XGROUP DELCONSUMER``) when it holds
nothing (no pending entry), has not read or claimed an entry for ``remove_idle_consumers``
seconds, and no live process holds its name (its name lease, :mod:`.names`, has lapsed). "Read
or claimed an entry" is ``XINFO CONSUMERS``' ``inactive`` where the server reports it (Redis
7.2+, Valkey), else its ``idle``: on those servers ``idle`` moves only when entries are taken,
as ``inactive`` does, while the newer servers' ``idle`` is reset by every read, even one that
returns nothing (:func:`~.wire.quiet_ms`). So the rule means the same on every server, and the
lease keeps a live consumer of a quiet stream from being removed on any of them.

The check and the removal are one script: a consumer that takes an entry (or whose process
comes back) between this member's look and the removal is not removed, so its pending entries
are never dropped with it.

A pass runs at most every 30 s (more often when ``remove_idle_consumers`` is short), after a
reclaim pass that reached the end of the pending list. Its failures are the fault
``hygiene``; a vanished group is left to the reader, which recreates it.
"""

from __future__ import annotations

import logging

import trio

from .attempts import SWEEP
from .client.errors import RedisError
from .client.scripts import Script
from .group_member import GroupMember, nogroup
from .names import lease_key
from .wire import parse_consumers, text

__all__ = ["GroupHygiene"]

_log = logging.getLogger("trio_streams.redis")

#: Seconds between hygiene passes (idle consumers removed, the ledger swept).
_HYGIENE_EVERY = 30.0

#: Remove a consumer if it still holds nothing, has taken no entry for a while and its name is
#: not leased. KEYS: stream, the name's lease. ARGV: group, consumer, quiet ms. 1 if removed.
_REMOVE_QUIET = Script(
    """
if redis.call('EXISTS', KEYS[2]) == 1 then return 0 end
for _, consumer in ipairs(redis.call('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])) do
  local f = {}
  for i = 1, #consumer, 2 do f[consumer[i]] = consumer[i + 1] end
  if f['name'] == ARGV[2] then
    local quiet = f['idle']
    if f['inactive'] ~= nil and f['inactive'] >= 0 then quiet = f['inactive'] end
    if f['pending'] ~= 0 or quiet < tonumber(ARGV[3]) then return 0 end
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
    return 1
  end
end
return 0
""",
    purpose="remove a consumer that holds nothing, has gone quiet and whose name is not leased",
)


class GroupHygiene:
    """The hygiene passes of one member (see the module docstring)."""

    def __init__(self, member: GroupMember) -> None:
        self._member = member
        remove_idle = member.stream.remove_idle_consumers
        self._every = (
            _HYGIENE_EVERY if remove_idle is None else min(_HYGIENE_EVERY, remove_idle / 2)
        )
        self._due = float("-inf")
        #: The ledger sweep's HSCAN cursor.
        self._sweep_cursor = "0"

    async def when_due(self) -> None:
        """Run a pass if one is due (the first at once)."""
        if trio.current_time() < self._due:
            return
        self._due = trio.current_time() + self._every
        remove_idle = self._member.stream.remove_idle_consumers
        if remove_idle is not None:
            await self._remove_idle_consumers(remove_idle)
        await self._sweep_ledger()

    async def _sweep_ledger(self) -> None:
        """One step of the ledger's sweep: fields of entries no longer pending are removed
        (:data:`~.attempts.SWEEP`)."""
        m = self._member
        assert m.host is not None
        try:
            cursor = await m.client.execute(
                "EVAL", SWEEP, 2, m.ledger_key, m.key, m.group, self._sweep_cursor, 200
            )
        except RedisError as exc:
            if not nogroup(exc):
                m.host.report_fault("hygiene", f"sweeping the attempt ledger: {exc}", error=exc)
            return
        self._sweep_cursor = text(cursor)

    async def _remove_idle_consumers(self, idle: float) -> None:
        """Remove the group's other consumers that the rule (module docstring) says are gone:
        a consumer with pending entries is left for the reclaim to empty first."""
        m = self._member
        assert m.host is not None
        threshold = int(idle * 1000)
        try:
            consumers = parse_consumers(
                await m.client.execute("XINFO", "CONSUMERS", m.key, m.group)
            )
            for name, pending, quiet in consumers:
                if name == m.consumer or pending or quiet < threshold:
                    continue
                removed = await m.client.execute(
                    "EVAL", _REMOVE_QUIET, 2, m.key, lease_key(m.key, m.group, name),
                    m.group, name, threshold,
                )  # fmt: skip
                if removed:
                    _log.info("%s: removed idle consumer %r of group %r", m.label, name, m.group)
        except RedisError as exc:
            if not nogroup(exc):
                m.host.report_fault("hygiene", f"removing idle consumers: {exc}", error=exc)
