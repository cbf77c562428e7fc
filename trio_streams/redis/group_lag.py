"""A group member's view of its group's lag: entries of the stream the group has not read
yet (``XINFO GROUPS``' ``lag``), read every few seconds for metrics."""

from __future__ import annotations

from typing import Any

import trio

from .client.errors import RedisError
from .group_member import GroupMember
from .wire import text

__all__ = ["GroupLag"]

#: How often a group member reads its group's lag (s).
_LAG_EVERY = 2.0


def _group_lag(reply: Any, group: str) -> int | None:
    """The ``lag`` of ``group`` in an ``XINFO GROUPS`` reply (RESP2 lists or RESP3 maps)."""
    for entry in reply or ():
        fields = (
            entry if isinstance(entry, dict) else dict(zip(entry[::2], entry[1::2], strict=False))
        )
        named = {text(k): v for k, v in fields.items()}
        if text(named.get("name", b"")) == group:
            lag = named.get("lag")
            return int(lag) if isinstance(lag, int) else None
    return None


class GroupLag:
    """The lag of a member's group, as :meth:`run` last read it."""

    def __init__(self, member: GroupMember) -> None:
        self._member = member
        #: The group's lag as last read (None: not known).
        self.value: int | None = None

    async def run(self) -> None:
        """Every ``_LAG_EVERY`` s, read the group's lag. Its failures are not faults: the next
        pass tries again. Cancelled with the subscription."""
        member = self._member
        while True:
            try:
                reply = await member.client.execute("XINFO", "GROUPS", member.key)
            except RedisError:
                self.value = None
            else:
                self.value = _group_lag(reply, member.group)
            await trio.sleep(_LAG_EVERY)
