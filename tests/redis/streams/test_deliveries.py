"""Deliveries of stream entries: what they hold equals an eagerly built delivery's."""

from __future__ import annotations

from trio_streams.core.delivery import Delivery
from trio_streams.core.positions import Position
from trio_streams.redis.deliveries import EntryDelivery
from trio_streams.redis.wire import entry_position


def _delivery() -> EntryDelivery:
    return EntryDelivery("s", "1700000000000-7", b"body", {"k": "v"}, 2, ("1700000000000-7", 0))


def test_an_entry_delivery_sets_every_slot_a_delivery_has() -> None:
    delivery = _delivery()
    eager = Delivery("s", b"body", {"k": "v"}, attempt=2, handle=("1700000000000-7", 0))
    for slot in Delivery.__slots__:
        if slot in ("position", "timestamp_ms"):
            continue  # derived from the id (below)
        assert getattr(delivery, slot) == getattr(eager, slot), slot


def test_its_position_and_time_are_the_entry_ids_and_read_the_same_each_time() -> None:
    delivery = _delivery()
    position, ms = entry_position("1700000000000-7", "s")
    assert delivery.position == position == Position.entry("1700000000000-7", stream="s")
    assert delivery.position is delivery.position
    assert delivery.timestamp_ms == ms == 1700000000000
    assert "1700000000000-7" in repr(delivery)


def test_a_position_or_time_set_on_it_is_what_it_holds() -> None:
    delivery = _delivery()
    delivery.position = Position.entry("1-1", stream="s")
    delivery.timestamp_ms = 5
    assert delivery.position == Position.entry("1-1", stream="s")
    assert delivery.timestamp_ms == 5
