"""A group member's hygiene: consumers of the group that hold nothing and have been idle
``remove_idle_consumers`` seconds are removed, and ledger fields of entries no longer pending
(a crash between an acknowledgement and its field's removal) are swept.

A pass runs at most every 30 s (more often when ``remove_idle_consumers`` is short), after a
reclaim pass that reached the end of the pending list. Its failures are the fault
``hygiene``; a vanished group is left to the reader, which recreates it.
"""

from __future__ import annotations

import logging

import trio

from .attempts import SWEEP
from .client.errors import RedisError
from .group_member import GroupMember, nogroup
from .wire import parse_consumers, text

__all__ = ["GroupHygiene"]

_log = logging.getLogger("trio_streams.redis")

#: Seconds between hygiene passes (idle consumers removed, the ledger swept).
_HYGIENE_EVERY = 30.0


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
        """Remove the group's other consumers that hold nothing and have been idle ``idle``
        seconds (a consumer with pending entries is left for the reclaim to empty first)."""
        m = self._member
        assert m.host is not None
        try:
            consumers = parse_consumers(
                await m.client.execute("XINFO", "CONSUMERS", m.key, m.group)
            )
            for name, pending, idle_ms in consumers:
                if name != m.consumer and pending == 0 and idle_ms >= idle * 1000:
                    await m.client.execute("XGROUP", "DELCONSUMER", m.key, m.group, name)
                    _log.info("%s: removed idle consumer %r of group %r", m.label, name, m.group)
        except RedisError as exc:
            if not nogroup(exc):
                m.host.report_fault("hygiene", f"removing idle consumers: {exc}", error=exc)
