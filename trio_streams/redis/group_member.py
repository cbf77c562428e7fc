"""Who one consumer group subscription is, shared by its parts: the stream, the group, the
consumer's name, the entries it holds and its attempt ledger.

Its read (:mod:`.group_read`), its settles (:mod:`.group`) and its maintenance tasks (leases
and hand-back, :mod:`.group_leases`; reclaim, :mod:`.group_reclaim`; hygiene,
:mod:`.group_hygiene`; lag, :mod:`.group_lag`) each take the member instead of one another.
The group and the consumer's name are known at open; the ledger once the group is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import trio

from ..core.delivery import Delivery
from ..core.host import SubscriptionHost
from ..core.pipeline import Command
from .attempts import AttemptLedger
from .client import RedisClient
from .client.errors import RedisError, ReplyError
from .journal import journal_group
from .streams import DeletePolicy, RedisStream

__all__ = ["CHUNK", "GroupMember", "nogroup"]

#: Ids per XCLAIM / XACK command.
CHUNK = 1000


def nogroup(exc: RedisError) -> bool:
    """Whether ``exc`` says the group is gone (the reader recreates it; not a fault of a
    maintenance pass)."""
    return isinstance(exc, ReplyError) and exc.code == "NOGROUP"


@dataclass(slots=True, eq=False)
class GroupMember:
    """One consumer of a group on one stream (see the module docstring)."""

    client: RedisClient
    stream: RedisStream
    label: str
    key: str = ""
    #: Set at open: the stream's group, else one per subscription.
    group: str = ""
    #: This consumer's name, known at open.
    consumer: str = ""
    host: SubscriptionHost | None = None
    #: The attempt ledger's writer, made at open (the group is known then).
    ledger: AttemptLedger | None = None
    ledger_key: str = ""
    #: The epoch of this group's journals (:func:`~.journal.journal_epoch`), known at open.
    epoch: str = ""
    #: Entries held (read, not yet acknowledged or let go): renewed by the lease task.
    held: dict[str, Delivery] = field(default_factory=dict)
    #: Entries found deleted (or trimmed) while pending: acknowledged and counted.
    deleted_pending: int = 0
    #: Set when an entry stops being held, while the reader waits for that (after a seek).
    released: trio.Event | None = None
    #: Held by a reclaim pass from its claim until the reader hears of it, and by a seek's
    #: sweep of this consumer's pending list: the sweep never takes a claimed entry for its own.
    claim_lock: trio.Lock = field(default_factory=trio.Lock)

    def __post_init__(self) -> None:
        self.key = self.stream.key
        self.group = self.stream.group or ""

    def let_out(self, entry_id: str) -> Delivery | None:
        """``entry_id`` is no longer held: its delivery (None if it was not held)."""
        delivery = self.held.pop(entry_id, None)
        if self.released is not None:
            self.released.set()
        return delivery

    async def wait_released(self, ids: set[str]) -> None:
        """Wait until none of ``ids`` is held. Cancellable."""
        while not ids.isdisjoint(self.held):
            self.released = trio.Event()
            try:
                await self.released.wait()
            finally:
                self.released = None
        await trio.lowlevel.checkpoint()

    def journal_group(self) -> str:
        """The server, stream, group and epoch, as this group's journals name them."""
        return journal_group(self.client, self.key, self.group, self.epoch)

    def settle_commands(self, ids: Sequence[str]) -> list[Command]:
        """What acknowledges ``ids``, and removes their ledger fields: ``XACK``; with
        ``delete_on_ack`` (a work queue: acknowledged means gone, in the same step) one
        ``XACKDEL`` with the stream's :class:`~.streams.DeletePolicy` where the server has it,
        else ``XACK`` and ``XDEL`` (the policy ``keepref``; sent in one ``MULTI``/``EXEC``).

        Decided at each call from the server's table as last read, so a server replaced by
        another build is settled as it can be. ``delref`` and ``acked`` are always
        ``XACKDEL``: a server that lost it refuses the settle (the entries stay pending,
        delivered again) rather than have them deleted another way.
        """
        ledger = [] if self.ledger is None else self.ledger.settle_commands(ids)
        policy = self.stream.delete_policy
        if policy is None:
            return [("XACK", self.key, self.group, *ids), *ledger]
        commands = self.client.commands
        if policy is not DeletePolicy.KEEPREF or (
            not commands.is_snapshot and commands.has("xackdel")
        ):
            xackdel = ("XACKDEL", self.key, self.group, policy.name, "IDS", str(len(ids)), *ids)
            return [xackdel, *ledger]
        return [("XACK", self.key, self.group, *ids), ("XDEL", self.key, *ids), *ledger]
