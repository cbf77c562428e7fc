"""The shapes of a dispatcher's workers, all reading the one bounded delivery channel.

- :func:`take_runs`: the loop of each of ``workers=n`` tasks (with 1, messages are handled
  strictly in order). After one wait on the channel, a worker handles what is already queued
  (``receive_nowait``), up to :data:`RUN` deliveries, then passes a schedule point, so one pass
  through Trio's scheduler serves a run rather than each delivery, and a busy subscription
  still yields to every other task once a run.
- :func:`route_lanes`: ``workers=n, by_key=...``: one router task decodes each message, picks
  its lane from the key, and n lane tasks keep per-key order (lanes are bounded channels too).
- :func:`collect_batches`: ``batch=n, max_wait=s``: each worker collects up to n deliveries,
  waiting at most s after the first, and hands them on as one batch.

What a worker does with a delivery is the dispatcher's; a shape only takes deliveries off the
channel and hands them on. Cancelled, a shape reports abandoned what it took and did not hand
on (a lane router: what it routed and no lane took yet is the dispatcher's to report).
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Hashable
from typing import TYPE_CHECKING, Any

import trio

from .codec import DecodeError
from .delivery import Delivery
from .handler import UNDECODED
from .routing import ByStream
from .transport import Unsettled

if TYPE_CHECKING:
    from ._channel import DeliveryChannel
    from .routing import KeyFunction

__all__ = [
    "RUN",
    "KeyFailed",
    "KeyRaised",
    "collect_batches",
    "key_function",
    "route_lanes",
    "take_runs",
]

#: The most deliveries a worker handles between two schedule points when they are already
#: queued (see the module docstring).
RUN = 32
#: Deliveries waiting in each ordered lane.
LANE_BUFFER = 4
_UNDECODED: Any = UNDECODED


async def take_runs(
    channel: DeliveryChannel,
    handle: Callable[[Delivery], Awaitable[None]],
) -> None:
    """Hand every delivery of ``channel`` to ``handle``, one at a time, in runs, until the
    channel is closed and drained."""
    receive = channel.receive
    take = channel.receive_nowait
    checkpoint = trio.lowlevel.checkpoint
    while True:
        try:
            delivery = await receive()
        except trio.EndOfChannel:
            return
        run = RUN
        while True:
            await handle(delivery)
            run -= 1
            if not run:
                await checkpoint()  # a run's schedule point
                break
            try:
                delivery = take()
            except trio.WouldBlock:
                break
            except trio.EndOfChannel:
                return


class KeyFailed:
    """A lane router could not build a message (its payload type's own constructor raised):
    the lane runs the failure policy on it, as the handler's arguments would have."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


class KeyRaised:
    """The subscription's ``by_key`` function raised on a message: it has no lane, and no
    handler runs, so no attempt is charged; the lane settles it by the decode policy."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error


def key_function(
    by_key: str | KeyFunction | ByStream, decode: Callable[[bytes], Any]
) -> Callable[[Delivery], tuple[Hashable, Any]]:
    """A delivery's lane key and its message, as a lane router takes them: a header's value
    (the message left undecoded), or what ``by_key`` makes of the decoded message. What
    cannot be keyed goes to the lane of ``None``, its message saying why."""
    if isinstance(by_key, ByStream):
        return lambda delivery: (delivery.stream, _UNDECODED)
    if isinstance(by_key, str):
        header = by_key
        return lambda delivery: (delivery.headers.get(header), _UNDECODED)
    assert callable(by_key)
    key_function = by_key

    def key_of(delivery: Delivery) -> tuple[Hashable, Any]:
        try:
            message = decode(delivery.payload)
        except DecodeError:
            return None, _UNDECODED  # the lane decodes again and runs the decode policy
        except Exception as exc:  # noqa: BLE001 - a payload's own constructor failed
            return None, KeyFailed(exc)  # the lane runs the failure policy
        try:
            key = key_function(message)
            hash(key)
        except Exception as exc:  # noqa: BLE001 - one bad message must not stop the router
            return None, KeyRaised(exc)
        return key, message

    return key_of


async def route_lanes(
    channel: DeliveryChannel,
    nursery: trio.Nursery,
    lanes: int,
    key_of: Callable[[Delivery], tuple[Hashable, Any]],
    handle: Callable[[Delivery, Any], Awaitable[None]],
    in_lanes: dict[int, Delivery],
) -> None:
    """Route each delivery of ``channel`` to one of ``lanes`` lane tasks (started in
    ``nursery``) by its key; each lane hands its deliveries to ``handle`` in order.
    ``in_lanes`` holds the deliveries routed and not yet taken by their lane."""
    senders = []
    for _ in range(lanes):
        send, receive = trio.open_memory_channel[tuple[Delivery, Any]](LANE_BUFFER)
        senders.append(send)
        nursery.start_soon(_lane, receive, handle, in_lanes)
    async with contextlib.AsyncExitStack() as stack:
        for send in senders:
            await stack.enter_async_context(send)
        while True:
            try:
                delivery = await channel.receive()
            except trio.EndOfChannel:
                return
            in_lanes[id(delivery)] = delivery
            key, message = key_of(delivery)
            await senders[hash(key) % lanes].send((delivery, message))


async def _lane(
    receive: trio.MemoryReceiveChannel[tuple[Delivery, Any]],
    handle: Callable[[Delivery, Any], Awaitable[None]],
    in_lanes: dict[int, Delivery],
) -> None:
    async with receive:
        async for delivery, message in receive:
            del in_lanes[id(delivery)]
            await handle(delivery, message)


async def collect_batches(
    channel: DeliveryChannel,
    size: int,
    max_wait: float,
    handle: Callable[[list[Delivery]], Awaitable[None]],
    abandon: Callable[[Delivery, Unsettled], None],
) -> None:
    """Collect batches of up to ``size`` deliveries of ``channel``, each waiting at most
    ``max_wait`` after its first, and hand each to ``handle``. Cancelled while a batch fills,
    its deliveries are reported (``abandon``) abandoned."""
    while True:
        try:
            batch = [await channel.receive()]
        except trio.EndOfChannel:
            return
        ended = False
        try:
            with trio.move_on_after(max_wait):
                ended = await _fill(channel, batch, size)
        except BaseException:
            for delivery in batch:  # cancelled while filling the batch
                abandon(delivery, Unsettled.ABANDONED)
            raise
        await handle(batch)
        if ended:
            return


async def _fill(channel: DeliveryChannel, batch: list[Delivery], size: int) -> bool:
    """Add to ``batch`` until it holds ``size`` deliveries (taking what is queued first);
    True if the channel ended meanwhile. Cut short by a timeout, what it added stays added."""
    while len(batch) < size:
        try:
            batch.append(channel.receive_nowait())
            continue
        except trio.WouldBlock:
            pass
        except trio.EndOfChannel:
            return True
        try:
            batch.append(await channel.receive())
        except trio.EndOfChannel:
            return True
    return False
