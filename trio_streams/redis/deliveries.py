"""Deliveries of Redis stream entries: position and time built from the entry id when asked.

A delivery's position (``Position.entry(id)`` on its stream) and time (the id's ms part) are
fixed by its entry id. Most handlers never look at either, and building a position costs as
much as the rest of a delivery, so an :class:`EntryDelivery` keeps the id and builds both the
first time one is read (then keeps them). Read, they equal what an eagerly built delivery
holds; set, they hold what was set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..core.delivery import Delivery
from ..core.positions import Position
from .wire import entry_position

__all__ = ["EntryDelivery"]

# The base class's slots, reached under the properties that shadow them here.
_POSITION: Any = Delivery.__dict__["position"]
_TIMESTAMP: Any = Delivery.__dict__["timestamp_ms"]


class EntryDelivery(Delivery):
    """A :class:`Delivery` of the stream entry ``entry_id`` (its ``position`` and
    ``timestamp_ms`` are derived from the id on first use)."""

    __slots__ = (
        "careful",
        "claimed",
        "counted_at_read",
        "entry_id",
        "finished",
        "recorded",
        "runs",
        "sent",
        "suspect",
    )

    def __init__(
        self,
        stream: str,
        entry_id: str,
        payload: bytes,
        headers: Mapping[str, str],
        attempt: int,
        handle: Any,
    ) -> None:
        # Delivery.__init__'s work without its keyword parsing (one per entry on the hot
        # path): every slot it sets but the two derived from the id, which stay unset until
        # read. A test checks that no slot of Delivery is left out.
        self.stream = stream
        self.payload = payload
        self.headers = headers
        self.attempt = attempt
        self.handle = handle
        self.generation = 0
        self.ended = False
        self.layout_hint = None
        #: The entry's id, ``<ms>-<seq>``, as the server handed it out.
        self.entry_id = entry_id
        #: The handler runs the entry has had, as counted (:mod:`.attempts`).
        self.runs = 0
        #: The runs it was delivered with: more now means it ran in this process.
        self.counted_at_read = 0
        #: Its runs are written to the ledger before they begin (an entry claimed from another
        #: consumer: :mod:`.attempts`).
        self.careful = False
        #: Claimed from another consumer (a dead one's, or one handed back at a stop): owed to
        #: that consumer's work, so a seek never acknowledges it unhandled.
        self.claimed = False
        #: It came back with runs that did not end (its process died under one): it runs
        #: alone (``SubscriptionSource.runs_alone``).
        self.suspect = False
        #: Its latest run's journal record (0: none), the record once its handler finished
        #: (acknowledged, not flushed), and the runs the ledger in Redis has.
        self.recorded = 0
        self.finished = 0
        self.sent = 0

    @property
    def position(self) -> Position | None:
        """The entry's position on its stream (``Position.entry(entry_id)``)."""
        try:
            position: Position | None = _POSITION.__get__(self, Delivery)
        except AttributeError:  # not read yet
            position, _ = entry_position(self.entry_id, self.stream)
            _POSITION.__set__(self, position)
        return position

    @position.setter
    def position(self, value: Position | None) -> None:
        _POSITION.__set__(self, value)

    @property
    def timestamp_ms(self) -> int | None:
        """When the entry was added (the id's ms part, Unix epoch ms)."""
        try:
            timestamp_ms: int | None = _TIMESTAMP.__get__(self, Delivery)
        except AttributeError:  # not read yet
            timestamp_ms = int(self.entry_id.partition("-")[0])
            _TIMESTAMP.__set__(self, timestamp_ms)
        return timestamp_ms

    @timestamp_ms.setter
    def timestamp_ms(self, value: int | None) -> None:
        _TIMESTAMP.__set__(self, value)
