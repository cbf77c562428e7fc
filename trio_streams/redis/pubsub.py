"""Pub/Sub subscriptions: ``RedisChannel`` sources read through the client's subscriptions.

At most once, by nature: the server keeps nothing for a channel, so a subscriber receives what
is published while it is subscribed, once, and nothing else.

- **Readers.** One client subscription (one connection) per reader: classic channels and
  patterns have one reader, which the driver reads itself (each read takes one message, then
  what already arrived with it, up to ``count``); sharded channels in a cluster have one per
  node that owns some of them (a node serves ``SSUBSCRIBE`` only for its own slots), each read
  by a task the subscription owns (``host.start_soon``) into a bounded channel the driver reads.
  Back-pressure: a reader that cannot hand a message on stops reading its socket, and the
  server buffers for it until its ``client-output-buffer-limit pubsub`` is reached; then the
  server drops the connection, which is a gap like any other.
- **Drops.** The drop gives no sign before the reader has read all it was sent before it, which
  a slow handler may take long to get through. So each reader has a watch task
  (:meth:`~.client.Subscription.watch`, every ``health_check_interval``) that finds the drop
  while the handlers are busy, reports it at once and subscribes again at once; what the
  dropped connection received is still delivered, then delivery goes on with the new one.
- **Gaps.** When a reader loses its connection it reports the fault ``connection`` (health
  ``degraded`` while it lasts: messages published now are missed). Once it has resubscribed,
  the gap is reported once as the fault ``gap`` — when it began (for a drop: no later than the
  drop), how long it lasted, how many connection attempts it took, the how-many-th gap of the
  subscription — and counted in :attr:`ChannelSubscription.gaps`; both faults then clear and
  delivery goes on. After a drop the handlers are still behind: the gap waits behind what the
  dropped connection received, so the fault ``behind`` is raised before ``connection`` clears
  (health stays ``degraded``) and clears when delivery reaches the gap, that is when the
  handlers are given the first messages of the new connection.
- **Settles.** Nothing is acknowledged: ``ack`` and ``drop`` settle nothing. ``retry`` (and
  ``retry_after``, which the core holds in a Trio timer first: lost if the process dies)
  publishes a copy to the channel the message came on, with the retry-count header and this
  subscription as its target; every subscriber of the channel receives it, the others pass over
  it. A copy that cannot be published is the fault ``retry`` (the copy is lost). A dead letter
  is published to the ``dead_letter=`` channel (``SPUBLISH`` for a sharded source) with its
  reason headers; one that cannot be published is the fault ``dead letter`` (lost, as a
  message on a channel may be). With ``dead_letter_kind="stream"`` the core appends it to that
  stream instead, where it is kept.
- **Wire format.** The list/Pub/Sub frame (:mod:`.frames`); a message that is not a frame (a
  plain ``PUBLISH news hello`` from another client) is a headerless payload.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial

import trio

from ..core.delivery import Delivery, attempt_from_headers, retry_headers
from ..core.errors import TrioStreamsError
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome
from ..core.transport import DeadLetter, SourceFault, SubscriptionSource
from .channels import RedisChannel
from .client import Gap, Message, RedisClient, RedisCluster, RedisError, Subscription, key_slot
from .client.errors import ClusterError, format_address
from .frames import decode_frame, encode_frame
from .keytypes import check_dead_letter_key

__all__ = ["ChannelSubscription", "PubSubFailed"]

_NO_HEADERS: dict[str, str] = {}


class PubSubFailed(TrioStreamsError):
    """A Pub/Sub subscription cannot go on (its channels could not be subscribed again after a
    reconnect: refused, or moved to nodes it does not read); the message names the
    subscription, the channels and the cause."""


def _wall(at: float) -> str:
    """Trio-clock instant ``at`` as a wall-clock UTC time, to the millisecond."""
    wall = time.time() - (trio.current_time() - at)
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(wall))
    return f"{stamp}.{int(wall * 1000) % 1000:03d}Z"


class ChannelSubscription(SubscriptionSource):
    """Reads one ``RedisChannel``; see the module docstring."""

    seekable = False
    durable_delay = False
    live = True

    def __init__(
        self, client: RedisClient, channel: RedisChannel, *, label: str, count: int
    ) -> None:
        self._client = client
        self._channel = channel
        self._label = label
        self._count = count
        self.read_count = count
        self._publish = "SPUBLISH" if channel.sharded else "PUBLISH"
        self._send, self._receive = trio.open_memory_channel[Message](count)
        self._subscriptions: list[Subscription] = []
        #: The names each reader subscribed to.
        self._names: list[tuple[str, ...]] = []
        self._host: SubscriptionHost | None = None
        #: Readers whose connection is lost and not yet back.
        self._deaf: set[int] = set()
        #: Gaps since the subscription opened: reconnects that may have missed messages.
        self.gaps = 0
        #: Seconds spent deaf over all gaps.
        self.missed_seconds = 0.0
        #: The last gap, if any.
        self.last_gap: Gap | None = None
        #: Gaps that wait behind what a dropped connection received (fault ``behind``).
        self._behind: set[Gap] = set()

    async def open(self, host: SubscriptionHost) -> None:
        self._host = host
        if self._channel.dead_letter_kind == "stream":  # a channel is no key: nothing to check
            await check_dead_letter_key(self._client, host, "stream", label=self._label)
        readers = await self._readers()
        for index, names in enumerate(readers):
            pattern, sharded = self._channel.pattern, self._channel.sharded
            subscription = self._client.subscribe(
                () if pattern or sharded else names,
                patterns=names if pattern else (),
                shard_channels=names if sharded else (),
                on_lost=partial(self._lost, index, names),
                on_resumed=partial(self._gap, index, names),
            )
            self._subscriptions.append(subscription)  # closed by aclose, whatever happens
            await subscription.__aenter__()  # subscribed, confirmed by the server
        self._names = readers
        for index, subscription in enumerate(self._subscriptions):
            host.start_soon(self._watch, index, subscription, name=f"{self._label}: drop watch")
        if len(readers) > 1:  # one task per node, merged into the channel the driver reads
            for index, subscription in enumerate(self._subscriptions):
                host.start_soon(self._pump, index, subscription, name=f"{self._label}: reader")

    async def _readers(self) -> list[tuple[str, ...]]:
        """The names each reader subscribes to: all of them, or (sharded channels in a
        cluster) those of each node."""
        names = self._channel.names
        client = self._client
        if not self._channel.sharded or not isinstance(client, RedisCluster):
            await trio.lowlevel.checkpoint()
            return [names]
        await client.refresh_slots()
        by_node: dict[object, list[str]] = {}
        for name in names:
            node = client.node_for_slot(key_slot(name))
            if node is None:
                raise ClusterError(
                    f"{self._label}: no node serves the slot of shard channel {name!r}"
                )
            by_node.setdefault(node, []).append(name)
        return [tuple(group) for group in by_node.values()]

    def _what(self, names: tuple[str, ...]) -> str:
        channel = self._channel
        return RedisChannel(*names, pattern=channel.pattern, sharded=channel.sharded).describe()

    def _lost(self, index: int, names: tuple[str, ...], error: RedisError) -> None:
        """A reader's connection is lost: deaf until it has subscribed again."""
        self._deaf.add(index)
        assert self._host is not None
        self._host.report_fault(
            "connection",
            f"Pub/Sub connection for {self._what(names)} lost ({error}); what is published "
            "until it is back is missed",
            error=error,
        )

    def _gap(self, index: int, names: tuple[str, ...], gap: Gap) -> None:
        """A reader subscribed again after ``gap``: report it once, count it, go on (told
        when it happens; the :class:`Gap` the iteration yields later is passed over)."""
        self.gaps += 1
        seconds = gap.resumed_at - gap.lost_at
        self.missed_seconds += seconds
        self.last_gap = gap
        host = self._host
        assert host is not None
        host.report_fault(
            "gap",
            f"missed what was published to {self._what(names)} for {seconds:.3f} s, from "
            f"{_wall(gap.lost_at)} to {_wall(gap.resumed_at)} ({gap.attempts} connection "
            f"attempt(s); lost: {gap.error}); gap {self.gaps} of this subscription",
            error=gap.error,
        )
        if self._subscriptions[index].draining:  # the handlers have the backlog to get through
            self._behind.add(gap)
            host.report_fault(
                "behind",
                f"the handlers of {self._what(names)} are behind since the drop at "
                f"{_wall(gap.lost_at)}: they still get what the dropped connection received, "
                "and reach the new connection's messages after it",
            )
        host.clear_fault("gap")  # delivery goes on: the gap is a record, not a state
        self._deaf.discard(index)
        if not self._deaf:
            host.clear_fault("connection")
        host.answered()  # a retry or dead letter the outage failed is over too (host.py)

    async def _pump(self, index: int, subscription: Subscription) -> None:
        """Hand one node's messages to the driver (blocking when the channel is full)."""
        send = self._send
        while True:
            for message in await self._next(index, subscription):
                await send.send(message)

    async def _watch(self, index: int, subscription: Subscription) -> None:
        """Find a drop of one reader while the handlers are busy, and subscribe it again
        (:meth:`~.client.Subscription.watch`); cancelled with the subscription's tasks."""
        try:
            await subscription.watch()
        except RedisError as exc:  # subscribing again was refused: no reconnect fixes it
            raise self._failed(index, subscription, exc) from exc

    def _failed(self, index: int, subscription: Subscription, exc: RedisError) -> PubSubFailed:
        address = subscription.connection.address if subscription.connection else None
        where = f" on {format_address(address)}" if address else ""
        return PubSubFailed(
            f"{self._label}: subscribing again to {self._what(self._names[index])}{where} "
            f"failed: {type(exc).__name__}: {exc}"
        )

    async def _next(self, index: int, subscription: Subscription) -> list[Message]:
        """The next messages of one reader: waits for one, then takes what already arrived
        (up to a read); empty when it met only gaps."""
        try:
            first = await anext(subscription)
        except StopAsyncIteration:  # closed: only at the end, when nobody reads any more
            await trio.sleep_forever()
        except RedisError as exc:  # a refusal or a split slot map: no reconnect fixes it
            raise self._failed(index, subscription, exc) from exc
        return self._messages([first, *subscription.take_buffered(self._count - 1)])

    def _deliver(self, message: Message) -> Delivery:
        payload, headers = decode_frame(message.data)
        return Delivery(
            message.channel.decode("utf-8", "replace"),
            payload,
            headers or _NO_HEADERS,
            attempt=attempt_from_headers(headers) if headers else 1,
            handle=message.channel,
        )

    def poll(self) -> Sequence[Delivery]:
        if len(self._subscriptions) == 1:
            items = self._subscriptions[0].take_buffered(self._count)
            return [self._deliver(m) for m in self._messages(items)] if items else ()
        return self._take([], self._count)

    def _take(self, out: list[Delivery], limit: int) -> list[Delivery]:
        receive = self._receive
        while len(out) < limit:
            try:
                message = receive.receive_nowait()
            except (trio.WouldBlock, trio.EndOfChannel):
                break
            out.append(self._deliver(message))
        return out

    async def read(self) -> Sequence[Delivery] | None:
        if len(self._subscriptions) == 1:  # one reader: read it here, no task in between
            while True:
                messages = await self._next(0, self._subscriptions[0])
                if messages:
                    return [self._deliver(m) for m in messages]
        first = await self._receive.receive()
        return self._take([self._deliver(first)], self._count)

    def unread(self) -> int:
        return self._receive.statistics().current_buffer_used

    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        if outcome.consumes:  # nothing to acknowledge: nothing written
            await trio.lowlevel.checkpoint()
            return False
        assert self._host is not None
        copy = encode_frame(delivery.payload, retry_headers(delivery, self._host.retry_target))
        try:
            await self._client.execute(self._publish, delivery.handle, copy)
        except RedisError as exc:
            raise SourceFault(
                "retry",
                f"{self._publish} of a retry copy to {delivery.stream!r} failed, the copy is "
                f"lost: {exc}",
                left="the copies were lost",
            ) from exc
        return True

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        if not self._channel.dead_letters_to_channel:
            await trio.lowlevel.checkpoint()
            return False  # the core appends it to the dead-letter stream
        copy = encode_frame(delivery.payload, letter.headers_for(delivery))
        try:
            await self._client.execute(self._publish, letter.destination, copy)
        except RedisError as exc:
            raise SourceFault(
                "dead letter",
                f"{self._publish} of a dead letter to {letter.destination!r} failed, the letter "
                f"is lost: {exc}",
                left="the letters were lost",
            ) from exc
        return True

    async def aclose(self) -> None:
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            await subscription.aclose()
        self._send.close()
        self._receive.close()
        await trio.lowlevel.checkpoint()

    def _messages(self, items: list[Message | Gap]) -> list[Message]:
        """The messages of ``items``; the gaps among them were reported when they ended, and
        one that waited behind a dropped connection's backlog ends the fault ``behind`` once
        none is left (delivery has reached the new connection's messages)."""
        messages: list[Message] = []
        for item in items:
            if type(item) is Message:
                messages.append(item)
            elif item in self._behind:
                self._behind.discard(item)
                if not self._behind and self._host is not None:
                    self._host.clear_fault("behind")
        return messages
