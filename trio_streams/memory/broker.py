"""``MemoryBroker`` and the in-process subscription reader."""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, Protocol

from trio.lowlevel import cancel_shielded_checkpoint, checkpoint, checkpoint_if_cancelled

from ..core.broker import Broker
from ..core.delivery import (
    RETRY_COUNT_HEADER,
    Delivery,
    SequenceDelivery,
    attempt_from_headers,
    retry_headers,
)
from ..core.destinations import Destination, DestinationKind
from ..core.errors import ConfigurationError, UnsupportedError
from ..core.group_moves import shared_group_refusal
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome, OutcomeKind
from ..core.pipeline import CommandCheck, Pipeline, Segment
from ..core.positions import Position, delivered_position
from ..core.schedule import FairShare
from ..core.transport import (
    SeekRefused,
    Source,
    SubscriptionSource,
    Transport,
    Unsettled,
    read_count_option,
    settles_with,
)
from .channels import MemoryChannel, MemoryChannelSubscription, channel_bus
from .log import Cursor, Entry, Group, MemoryHub
from .queues import MemoryList, MemoryListSubscription, queue_of
from .sources import MemoryStream

__all__ = ["MemoryBroker", "MemorySubscription", "MemoryTransport"]


class SegmentCheckFactory(Protocol):
    """``Broker.segment_check``: the check for one subscription's window segments."""

    def __call__(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> CommandCheck | None: ...


#: Messages taken per read unless the subscription says ``count=``.
DEFAULT_COUNT = 64


class MemoryBroker(Broker):
    """In-process streams. Messages live as long as the broker object (``max_len`` per stream).

    Subscriber options: ``count`` — messages taken per read (default 64); ``pipeline=True`` —
    emulate the Redis pipeline window: each delivery's ``ctx.pipeline`` segment is kept when
    its outcome is ``ack`` and discarded otherwise, and recorded (``hub.segments``,
    ``t.segments(handler)`` under ``app.test()``); ``atomic=True`` is accepted alongside it (in
    process, every segment and its settle already take effect together).
    """

    source_types = (MemoryStream,)
    subscriber_options = frozenset({"count", "pipeline", "atomic"})
    kind = "memory"  # described as the core describes a broker: an in-process server

    def __init__(self, *, name: str | None = None, max_len: int = 100_000, **defaults: Any) -> None:
        super().__init__(name=name or "memory", **defaults)
        self.hub = MemoryHub(max_len=max_len)

    def source_for(self, name: str) -> MemoryStream:
        """A plain name is ``MemoryStream(name)``: the live tail, from the tip — what
        ``app.test()`` runs a name of the other brokers as (a Redis group or a stream file's
        durable consumer have nothing to resume in process)."""
        return MemoryStream(name)

    def check_subscription(self, source: Source, options: Mapping[str, Any]) -> None:
        super().check_subscription(source, options)
        _check_count(options)
        _check_window(options)

    @asynccontextmanager
    async def connect(self) -> AsyncIterator[Transport]:
        yield MemoryTransport(self.hub)

    def reply_source(self, address: str) -> Source:
        """Replies come on an in-process channel of this broker's (as a Redis broker's come on
        a Pub/Sub channel)."""
        return MemoryChannel((address,))


def _check_count(options: Mapping[str, Any]) -> int:
    return read_count_option(options, DEFAULT_COUNT)


def _count_or_default(options: Mapping[str, Any]) -> int:
    count = options.get("count")
    if isinstance(count, int) and not isinstance(count, bool) and count >= 1:
        return count
    return DEFAULT_COUNT


def _check_window(options: Mapping[str, Any]) -> bool:
    for name in ("pipeline", "atomic"):
        if not isinstance(options.get(name, False), bool):
            raise ConfigurationError(f"{name} is True or False, not {options[name]!r}")
    if options.get("atomic") and not options.get("pipeline"):
        raise ConfigurationError("atomic=True wraps the pipeline window: give pipeline=True too")
    return bool(options.get("pipeline", False))


class MemoryTransport(Transport):
    """A connected in-process broker. Also what ``app.test()`` gives every broker."""

    def __init__(
        self,
        hub: MemoryHub,
        *,
        strict_options: bool = True,
        follow_replays: bool = False,
        segment_check: SegmentCheckFactory | None = None,
    ) -> None:
        self.hub = hub
        #: Under ``app.test()``, the real broker's check of window segments (so the in-process
        #: window refuses what the real one refuses).
        self._segment_check = segment_check
        self._strict = strict_options
        self._follow_replays = follow_replays
        self._share = FairShare()

    async def publish(
        self, destination: str, payload: bytes, headers: Mapping[str, str]
    ) -> Position:
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        await checkpoint_if_cancelled()  # a cancelled publish publishes nothing
        hub = self.hub
        if hub.queues:  # a Redis broker's lists, under app.test(): one key space with streams
            hub.check_key(destination, "stream")
        entry = hub.append(destination, payload, dict(headers) if headers else {})
        await self._share.after_progress()
        return delivered_position(entry.seq, destination)

    async def unserved(self, destination: Destination) -> str:
        """A stream no subscription of this hub reads now (a list or a channel: nothing said)."""
        await checkpoint()
        if destination.kind is DestinationKind.STREAM and not self.hub.readers[destination.name]:
            return f"no subscription reads stream {destination.name!r}: nothing serves it"
        return ""

    async def publish_to(
        self, destination: Destination, payload: bytes, headers: Mapping[str, str]
    ) -> Position | int:
        """A list or a channel, under ``app.test()`` for a broker that has them. A list is an
        in-process work queue of that name (a name holds a list or a stream, as in Redis:
        ``WrongKeyType`` otherwise; the receipt is its length, as ``RPUSH`` answers); a channel
        goes to the in-process Pub/Sub bus (:mod:`.channels`), apart from every stream, to
        whoever is subscribed now, and the receipt is how many subscriptions received it, as
        ``PUBLISH`` answers. (A ``MemoryBroker`` of its own has streams only and refuses
        them.)"""
        if not isinstance(payload, bytes):
            raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
        if destination.is_channel:
            await checkpoint_if_cancelled()  # a cancelled publish publishes nothing
            sharded = destination.kind is DestinationKind.SHARD_CHANNEL
            bus = channel_bus(self.hub, sharded=sharded)
            receivers = bus.publish(destination.name, payload, dict(headers) if headers else {})
            await self._share.after_progress()
            return receivers
        if destination.kind is DestinationKind.LIST:
            await checkpoint_if_cancelled()  # a cancelled publish publishes nothing
            self.hub.check_key(destination.name, "list")
            length = queue_of(self.hub, destination.name).push(payload, dict(headers))
            self.hub.wake()
            await self._share.after_progress()
            return length
        return await self.publish(destination.name, payload, headers)

    def open_subscription(
        self, source: Source, options: Mapping[str, Any], *, label: str
    ) -> SubscriptionSource:
        stream = source if isinstance(source, MemoryStream) else source.in_process()
        if isinstance(stream, MemoryChannel):  # a Redis channel, under app.test()
            count = _count_or_default(options)
            return MemoryChannelSubscription(self.hub, stream, label=label, count=count)
        # Under app.test() the real broker checked its options at mount; its read size (count=,
        # where it has one) sizes the in-process read and channel as it would in production.
        count = _check_count(options) if self._strict else _count_or_default(options)
        # Whatever the real transport, a window asked for is emulated (app.test()).
        window = _check_window(options) if self._strict else bool(options.get("pipeline"))
        check = None
        if window and self._segment_check is not None:
            check = self._segment_check(source, options, label=label)
        if isinstance(stream, MemoryList):
            return MemoryListSubscription(
                self.hub, stream, label=label, count=count, window=window, segment_check=check
            )
        assert isinstance(stream, MemoryStream), stream
        return MemorySubscription(
            self.hub,
            stream,
            label=label,
            count=count,
            follow=self._follow_replays,
            window=window,
            segment_check=check,
        )


class MemorySubscription(SubscriptionSource):
    """Reads one ``MemoryStream`` through a cursor (its own, or its consumer group's)."""

    durable_delay = False

    def __init__(
        self,
        hub: MemoryHub,
        stream: MemoryStream,
        *,
        label: str,
        count: int,
        follow: bool = False,
        window: bool = False,
        segment_check: CommandCheck | None = None,
    ) -> None:
        self._hub = hub
        #: Counted among the hub's readers of its streams (from ``open`` to ``aclose``).
        self._reading = False
        self._segment_check = segment_check
        self._refused_seeks = stream.refused_seeks
        #: The segment of each delivery whose handler queued a command (pipeline=True only).
        self._window: dict[int, Pipeline] | None = {} if window else None
        self._label = label
        #: What retry copies name as their target; known at open (None: no target).
        self._retry_target: str | None = None
        self._count = count
        self.read_count = count
        start = stream.start_at
        if start is None:
            start = Position.beginning() if stream.replaying else Position.end()
        self.live = not stream.replaying
        # A replay that keeps following once it reaches the tip (app.test(): the test is still
        # publishing). Seek refusals still treat it as a replay.
        self._ends = stream.replaying and not follow
        self._group = stream.group
        self._group_seek = stream.group_seek
        self._keys = stream.keys
        #: What this member held when it last moved its group (by ``id``): read at the old
        #: position, so let go of as skipped when the seek makes them stale.
        self._cut: set[int] = set()
        #: The group this member belongs to (None: a cursor of its own).
        self._members: Group | None = None
        #: What this group member holds (read, not settled), by ``id(delivery)``: the life it
        #: was read in (``kill`` starts a new one).
        self._held: dict[int, tuple[Delivery, int]] = {}
        self._life = 0
        #: Held deliveries that came back with runs (they run alone), by ``id``.
        self._suspects: set[int] = set()
        if stream.group is not None:
            group = hub.group(stream.keys, stream.group, start)
            self._members = group
            self._cursor: Cursor = group.cursor
            self.seekable = stream.group_seek is not None
        else:
            self._cursor = Cursor(hub, stream.keys, start)
            self.seekable = True

    async def open(self, host: SubscriptionHost) -> None:
        if self._group is not None:
            # Any member of the group handles a copy another member asked for, as the group
            # shares one cursor: the copy is the group's, not one member's.
            host.retry_target = f"group:{self._group}"
        if self._members is not None:
            self._members.join(self, self._label, self._held)
        self._retry_target = host.retry_target
        self._hub.readers.update(self._keys)
        self._reading = True
        await checkpoint()

    def poll(self) -> Sequence[Delivery]:
        return self._take()

    def unread(self) -> int:
        return self._cursor.available()

    async def read(self) -> Sequence[Delivery] | None:
        # Take, then return without a schedule point: deliveries are never held across a
        # yield here, so "nothing unread and nothing in flight" is always observable exactly.
        await checkpoint_if_cancelled()
        while True:
            batch = self._take()
            if batch:
                return batch
            if self._ends:
                await cancel_shielded_checkpoint()
                return None
            await self._hub.activity.park()

    def _take(self) -> list[Delivery]:
        group = self._members
        if group is None:
            return [_deliver(e) for e in self._cursor.take(self._count)]
        entries: list[Entry] = []
        while group.returned and len(entries) < self._count:
            entries.append(group.returned.popleft())
        # Entries handed back carry their runs; one the cursor reads is new to the group (as
        # an entry a moved group reads again: a seek charges no attempt).
        returned = len(entries)
        if len(entries) < self._count:
            entries += self._cursor.take(self._count - len(entries))
        out = []
        runs, held, life = group.runs, self._held, self._life
        for index, entry in enumerate(entries):
            delivery = _deliver(entry)
            again = runs.get((entry.stream, entry.seq), 0) if index < returned else 0
            if again:
                delivery.attempt += again
                self._suspects.add(id(delivery))
            held[id(delivery)] = (delivery, life)
            out.append(delivery)
        return out

    def runs_alone(self, delivery: Delivery) -> bool:
        """An entry that came back with runs: its last run died with its consumer."""
        return id(delivery) in self._suspects

    # ---- a group member's runs, kills and hand-backs -----------------------------------------

    @property
    def counts_runs(self) -> bool:  # type: ignore[override]
        """A group member counts handler runs, as a live group's attempt ledger does."""
        return self._members is not None

    def record_run(self, delivery: Delivery) -> bool:
        if self._members is not None and id(delivery) in self._held:
            entry: Entry = delivery.handle
            key = (entry.stream, entry.seq)
            self._members.runs[key] = self._members.runs.get(key, 0) + 1
        return True

    async def attempt_started(self, delivery: Delivery) -> None:
        self.record_run(delivery)
        await checkpoint()

    @property
    def consumer_can_die(self) -> bool:  # type: ignore[override]
        """A group member dies at :meth:`kill`."""
        return self._members is not None

    def died_with_consumer(self, delivery: Delivery) -> bool:
        """``delivery`` was read by this member before :meth:`kill` killed it."""
        held = self._held.get(id(delivery))
        return held is not None and held[1] < self._life

    def kill(self) -> int:
        """This group member dies: what it held (read, not settled) goes back to the group, to
        be delivered again to any member, each with its attempt as its handler runs make it
        (one a handler never started is not charged, as live). Returns how many went back."""
        self._life += 1
        return self._hand_back(dead_only=True)

    def _hand_back(self, *, dead_only: bool) -> int:
        group = self._members
        if group is None:
            return 0
        back = [
            (delivery, key)
            for key, (delivery, life) in self._held.items()
            if not dead_only or life < self._life
        ]
        back.sort(key=lambda held: held[0].handle.order)
        for delivery, key in back:
            if dead_only:  # its handler, if any, ends with it: its later settle is ignored
                self._held[key] = (delivery, -1)
            else:
                del self._held[key]
        group.returned.extendleft(reversed([d.handle for d, _ in back]))
        if back:
            self._hub.wake()
        return len(back)

    def _release(self, delivery: Delivery) -> bool:
        """``delivery`` is settled: False if its member was killed since (nothing to do)."""
        held = self._held.pop(id(delivery), None)
        self._suspects.discard(id(delivery))
        self._cut.discard(id(delivery))
        if held is not None and held[1] < 0:
            return False
        if self._members is not None:
            entry: Entry = delivery.handle
            self._members.runs.pop((entry.stream, entry.seq), None)
        return True

    async def aclose(self) -> None:
        """A group member's close hands back what it still holds (delivered again at once to
        another member), as the live close does."""
        if self._members is not None:
            self._members.leave(self)
        if self._reading:
            self._reading = False
            self._hub.readers.subtract(self._keys)
        self._hand_back(dead_only=False)
        await cancel_shielded_checkpoint()

    async def seek(self, position: Position) -> None:
        if not self.seekable:
            raise UnsupportedError(f"{self._label}: a consumer group member cannot seek")
        group = self._members
        if group is not None and self._group_seek != "shared":
            others = group.others(self)
            if others:
                assert self._group is not None
                raise SeekRefused(
                    shared_group_refusal(self._label, self._keys[0], self._group, others)
                )
        for kind, reason in self._refused_seeks:
            if position.kind is kind:
                raise SeekRefused(f"{self._label}: {position!r} {reason}")
        try:
            self._cursor.move(position)
        except SeekRefused as exc:
            # Name the subscription, as a stream file's refusal does.
            raise SeekRefused(f"{self._label}: seek to {position!r} refused: {exc}") from None
        if group is not None:
            self._cut = set(self._held)
        self._hub.wake()
        await checkpoint()

    @property
    def acks_are_noops(self) -> bool:
        # Without a window an ack settles nothing: the log keeps every message anyway (a group
        # member's ack ends what it holds).
        return self._window is None and self._members is None and settles_with(self, _MEMORY_SETTLE)

    def pipeline(self, delivery: Delivery) -> Pipeline | None:
        window = self._window
        if window is None:
            return None
        segment = window.get(id(delivery))
        if segment is None:
            segment = window[id(delivery)] = Pipeline(self._segment_check)
        return segment

    def deferred(self, delivery: Delivery, outcome: Outcome) -> None:
        # The window's verdict is the handler's outcome, not the retry() that ends the delay.
        if self._window is not None:
            self._decide(delivery, kept=False, decided_by=outcome.kind.value)

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        if self._window is not None:
            self._decide(delivery, kept=False, decided_by=why.value)
        held = self._held.get(id(delivery))
        if held is not None and held[1] < 0:
            del self._held[id(delivery)]  # its member was killed: the entry went back
            self._suspects.discard(id(delivery))
        elif id(delivery) in self._cut and why in (Unsettled.STALE, Unsettled.PURGED):
            # Read at the position a seek moved the group from: skipped, as live (acknowledged).
            self._cut.discard(id(delivery))
            self._release(delivery)
        # Otherwise a group member keeps holding it (pending, as live) until its close.

    def _decide(self, delivery: Delivery, *, kept: bool, decided_by: str) -> None:
        assert self._window is not None
        segment = self._window.pop(id(delivery), None)
        if segment is not None:
            segment.close(
                f"the window already {'kept' if kept else 'discarded'} this delivery's segment: "
                "a command queued after its handler returned is never sent"
            )
        if segment is not None and len(segment):
            self._hub.segments.append(
                Segment(self._label, delivery.stream, segment.commands, kept, decided_by)
            )

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        if self._window is not None:
            kept = outcome.kind is OutcomeKind.ACK
            self._decide(delivery, kept=kept, decided_by=outcome.kind.value)
        if self._members is not None and not self._release(delivery) and outcome.consumes:
            await checkpoint()
            return  # its member was killed: the entry went back (a retry still copies, as live)
        if not outcome.consumes:
            # As on a stream file: a retry is a copy at the end of the stream, carrying the
            # retry count, so it survives seeks and every reader of the stream sees it.
            self._hub.append(
                delivery.stream, delivery.payload, retry_headers(delivery, self._retry_target)
            )


#: The settle ``acks_are_noops`` speaks for (a subclass or a wrapper may replace it).
_MEMORY_SETTLE = MemorySubscription.settle


def _deliver(entry: Entry) -> Delivery:
    headers = entry.headers
    return SequenceDelivery(
        entry.stream,
        entry.payload,
        headers,
        entry.seq,
        None,
        attempt_from_headers(headers) if RETRY_COUNT_HEADER in headers else 1,
        entry.timestamp_ms,
        entry,
    )
