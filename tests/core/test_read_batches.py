"""A read queued whole (``ReadBatch``) keeps every promise of deliveries queued one by one: it
counts as the messages it holds, its messages come out in order, a plain one as its payload
alone and any other as the delivery the transport would have made, a seek purges exactly the
messages not yet taken (each reported as a delivery), and what does not fit waits for room."""

from typing import Any

import trio
import trio.testing

from trio_streams.core._channel import DeliveryChannel
from trio_streams.core.delivery import Delivery, ReadBatch, SequenceDelivery
from trio_streams.core.transport import Unsettled

ENVELOPE = b"\x00env:"


def build(item: tuple[int, bytes]) -> Delivery:
    seq, payload = item
    if payload.startswith(ENVELOPE):
        return SequenceDelivery("s", payload[len(ENVELOPE) :], {"h": "v"}, seq, None, 2, None)
    return SequenceDelivery("s", payload, {}, seq, None, 1, None)


def batch_of(*payloads: bytes, first: int = 1) -> ReadBatch:
    items = [(first + i, payload) for i, payload in enumerate(payloads)]
    return ReadBatch(items, build, 1, (ENVELOPE,))


def channel_reporting(capacity: int) -> tuple[DeliveryChannel, list[tuple[int, Unsettled]]]:
    reported: list[tuple[int, Unsettled]] = []

    def on_unsettled(delivery: Delivery, why: Unsettled) -> None:
        assert isinstance(delivery, SequenceDelivery)
        reported.append((delivery.seq, why))

    return DeliveryChannel(capacity, on_unsettled=on_unsettled), reported


def slots(delivery: Delivery) -> dict[str, Any]:
    return {slot: getattr(delivery, slot) for slot in (*Delivery.__slots__, "seq", "shard")}


async def test_a_read_batch_counts_as_the_messages_it_holds() -> None:
    channel, _ = channel_reporting(10)
    assert await channel.send_from(batch_of(*[b"x"] * 4), 0) == 4
    assert channel.queued == channel.outstanding == 4


async def test_what_does_not_fit_waits_for_room_and_comes_out_in_order() -> None:
    channel, _ = channel_reporting(3)
    batch = batch_of(b"1", b"2", b"3", b"4", b"5")
    assert await channel.send_from(batch, 0) == 3
    taken: list[bytes] = []
    async with trio.open_nursery() as nursery:
        sent: list[int] = []

        async def send_rest() -> None:
            sent.append(await channel.send_from(batch, 3))

        nursery.start_soon(send_rest)
        await trio.testing.wait_all_tasks_blocked()
        assert sent == []  # full: the driver waits
        payload = channel.take_payload()
        assert payload is not None
        taken.append(payload)
    assert sent == [4]  # room for one: the fourth message, as a part of the batch
    payload = channel.take_payload()
    assert payload is not None
    taken.append(payload)
    assert await channel.send_from(batch, 4) == 5
    while (payload := channel.take_payload()) is not None:
        taken.append(payload)
    assert taken == [b"1", b"2", b"3", b"4", b"5"]
    assert channel.queued == 0


async def test_a_plain_message_is_taken_as_its_payload_and_any_other_as_its_delivery() -> None:
    channel, _ = channel_reporting(10)
    await channel.send_from(batch_of(b"1", ENVELOPE + b"2", b"3"), 0)
    assert channel.take_payload() == b"1"
    assert channel.taken_from is not None
    made = channel.taken_from.made(channel.taken_index)
    assert slots(made) == {**slots(build((1, b"1"))), "generation": channel.generation}
    assert channel.take_payload() is None  # an envelope: it needs its delivery
    assert channel.queued == 2  # nothing was taken
    delivery = channel.receive_nowait()
    assert slots(delivery) == {**slots(build((2, ENVELOPE + b"2"))), "generation": 0}
    assert delivery.headers == {"h": "v"} and delivery.attempt == 2
    third = await channel.receive()
    assert isinstance(third, SequenceDelivery) and third.seq == 3


async def test_a_seek_purges_exactly_the_messages_not_yet_taken_each_as_a_delivery() -> None:
    channel, reported = channel_reporting(10)
    await channel.send_from(batch_of(b"1", b"2", b"3", b"4"), 0)
    await channel.send_from(batch_of(b"5", ENVELOPE + b"6", first=5), 0)
    assert channel.take_payload() == b"1"
    assert channel.receive_nowait().payload == b"2"
    assert channel.advance_generation() == 4
    assert reported == [(seq, Unsettled.PURGED) for seq in (3, 4, 5, 6)]
    assert channel.stale_count == 4 and channel.queued == 0
    assert channel.outstanding == 2  # the two taken are still in the dispatcher's hands
    assert channel.take_payload() is None
    await channel.send_from(batch_of(b"9", first=9), 0)
    assert channel.take_payload() == b"9"
    assert channel.taken_from is not None and channel.taken_from.generation == 1


async def test_a_graceful_hand_back_and_an_abandon_report_each_queued_message_once() -> None:
    channel, reported = channel_reporting(10)
    await channel.send_from(batch_of(b"1", b"2", b"3"), 0)
    assert channel.take_payload() == b"1"
    assert channel.hand_back() == 2
    assert reported == [(2, Unsettled.ABANDONED), (3, Unsettled.ABANDONED)]
    await channel.send_from(batch_of(b"4", b"5", first=4), 0)
    assert channel.abandon_rest() == 3  # 1 in hand (the dispatcher reports it), 4 and 5 queued
    assert reported[2:] == [(4, Unsettled.ABANDONED), (5, Unsettled.ABANDONED)]


async def test_the_driver_sees_the_deliveries_of_a_read_it_could_not_queue() -> None:
    batch = batch_of(b"1", ENVELOPE + b"2", b"3")
    assert len(batch) == 3
    assert [slots(d) for d in batch[1:]] == [
        slots(build((2, ENVELOPE + b"2"))),
        slots(build((3, b"3"))),
    ]
    assert [d.payload for d in batch] == [b"1", b"2", b"3"]
    assert batch[-1].payload == b"3"


async def test_the_channel_is_drained_and_closed_across_read_batches() -> None:
    channel, _ = channel_reporting(4)
    await channel.send_from(batch_of(b"1", b"2"), 0)
    channel.close()
    await channel.wait_queued()
    assert channel.take_payload() == b"1"
    assert (await channel.receive()).payload == b"2"
    try:
        await channel.wait_queued()
    except trio.EndOfChannel:
        pass
    else:
        raise AssertionError("a closed, drained channel ends")
