"""In-process Pub/Sub: channels apart from streams, patterns matched as the server matches them.

A Redis channel holds nothing: a message reaches whoever is subscribed when it is published.
In process, every publish to a channel goes to one bus (classic channels and sharded channels
each have their own, as on the server, where ``SUBSCRIBE`` never sees an ``SPUBLISH``), and a
subscription reads the bus from where it was when it subscribed, taking the messages of its
channels, or of the channels its glob patterns match (:func:`glob_match`, the server's rules).
The bus is not a stream: a stream of the same name is another thing, as it is on the server.

Like the stream log, a subscription holds a cursor, not a queue of its own, so a slow
subscriber costs its position only; the bus keeps the last ``max_len`` messages, and a
subscriber that falls further behind than that misses what was trimmed, as a Redis client too
slow for its output buffer is disconnected and misses what was published meanwhile.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Self

from trio.lowlevel import checkpoint, checkpoint_if_cancelled

from ..core.delivery import RETRY_COUNT_HEADER, Delivery, attempt_from_headers, retry_headers
from ..core.description import SourceDescription
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome
from ..core.sources import NamedSource
from ..core.transport import DeadLetter, Sharing, SubscriptionSource
from .log import Entry, MemoryHub, StreamLog
from .sources import SYSTEM

__all__ = ["ChannelBus", "MemoryChannel", "MemoryChannelSubscription", "glob_match"]


def glob_match(pattern: str | bytes, name: str | bytes) -> bool:
    """Whether channel ``name`` matches ``pattern`` under Redis's glob rules (``PSUBSCRIBE``,
    ``KEYS``): ``*`` any run of bytes, ``?`` one byte, ``[abc]`` / ``[a-z]`` / ``[^...]`` a set
    (an unclosed ``[`` runs to the end of the pattern), ``\\`` escapes the next byte. Matched on
    the UTF-8 bytes, as the server does (``?`` is one byte, not one character)."""
    p = pattern.encode() if isinstance(pattern, str) else pattern
    s = name.encode() if isinstance(name, str) else name
    return _match(p, 0, s, 0, [False])


def _match(p: bytes, pi: int, s: bytes, si: int, give_up: list[bool]) -> bool:
    """A port of the server's ``stringmatchlen`` (byte for byte, case-sensitive);
    ``give_up`` is its ``skipLongerMatches``: once a ``*`` found no match for any suffix,
    no longer prefix can match either."""
    plen, slen = len(p), len(s)
    while pi < plen and si < slen:
        c = p[pi]
        if c == 0x2A:  # '*'
            return _match_star(p, pi, s, si, give_up)
        if c == 0x3F:  # '?'
            si += 1
        elif c == 0x5B:  # '['
            matched, pi = _match_set(p, pi + 1, s[si])
            if not matched:
                return False
            si += 1
        else:
            if c == 0x5C and plen - pi >= 2:  # '\\': the next byte, literally
                pi += 1
            if p[pi] != s[si]:
                return False
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == 0x2A:
                pi += 1
            break
    return pi == plen and si == slen


def _match_star(p: bytes, pi: int, s: bytes, si: int, give_up: list[bool]) -> bool:
    """The rest of the match from the ``*`` at ``p[pi]``: the rest of the pattern against each
    suffix of ``s`` from ``si``, shortest prefix first."""
    plen, slen = len(p), len(s)
    while pi + 1 < plen and p[pi + 1] == 0x2A:
        pi += 1
    if pi + 1 == plen:
        return True
    while si < slen:
        if _match(p, pi + 1, s, si, give_up):
            return True
        if give_up[0]:
            return False
        si += 1
    give_up[0] = True
    return False


def _match_set(p: bytes, pi: int, byte: int) -> tuple[bool, int]:
    """Whether ``byte`` is in the set that starts at ``p[pi]`` (just after its ``[``), and
    where the set ends: the index of its ``]``, or of the pattern's last byte if unclosed."""
    plen = len(p)
    negate = pi < plen and p[pi] == 0x5E  # '^'
    if negate:
        pi += 1
    matched = False
    while True:
        if pi < plen and p[pi] == 0x5C and plen - pi >= 2:  # '\\' escapes
            pi += 1
            if p[pi] == byte:
                matched = True
        elif pi < plen and p[pi] == 0x5D:  # ']'
            break
        elif pi >= plen:  # unclosed: the set ran to the end of the pattern
            pi -= 1
            break
        elif plen - pi >= 3 and p[pi + 1] == 0x2D:  # a range 'a-z'
            low, high = sorted((p[pi], p[pi + 2]))
            pi += 2
            if low <= byte <= high:
                matched = True
        elif p[pi] == byte:
            matched = True
        pi += 1
    return matched != negate, pi


def _receivers(source: MemoryChannel, channel: str) -> int:
    if source.pattern:
        return sum(glob_match(p, channel) for p in source.names)
    return int(channel in source.names)


@dataclass(frozen=True, slots=True)
class MemoryChannel(NamedSource):
    """What an in-process channel subscription reads: the in-process form of a Redis channel
    source (``RedisChannel.in_process()``). Not mounted directly: in-process brokers have
    streams only; under ``app.test()`` a Redis broker's channels run on this."""

    names: tuple[str, ...]
    #: The names are glob patterns (``PSUBSCRIBE``).
    pattern: bool = False
    #: Sharded channels (``SSUBSCRIBE`` / ``SPUBLISH``): a bus of their own.
    sharded: bool = False
    #: ``dead_letter="name"`` names a channel of the same bus (else a stream).
    dead_letter_to_channel: bool = True

    label = "MemoryChannel"

    @property
    def streams(self) -> tuple[str, ...]:
        return self.names

    def arguments(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "sharded": self.sharded,
            "dead_letter_to_channel": self.dead_letter_to_channel,
        }

    def remake(self, names: tuple[str, ...], arguments: Mapping[str, Any]) -> Self:
        return type(self)(names, **arguments)  # its names are one argument

    def with_prefix(self, prefix: str) -> Self:
        """Prefixed already: ``RedisChannel.with_prefix`` escapes a prefix inside patterns."""
        del prefix
        return self

    @property
    def sharing(self) -> Sharing:
        return Sharing.LOCAL

    def description(self) -> SourceDescription:
        return SourceDescription(system=SYSTEM)

    def in_process(self) -> MemoryChannel:
        return self

    def matches(self, channel: str) -> bool:
        if self.pattern:
            return any(glob_match(p, channel) for p in self.names)
        return channel in self.names

    def reads_dead_letter(self, dead_letter: str) -> bool:
        """A dead letter published to a channel these names (or patterns) match comes back;
        one appended to a stream does not."""
        return self.dead_letter_to_channel and self.matches(dead_letter)


class ChannelBus:
    """Every message published to one kind of in-process channel (classic or sharded), in
    order; :class:`~.log.Entry.stream` is the channel it was published to."""

    def __init__(self, hub: MemoryHub, name: str) -> None:
        self._hub = hub
        self.log = StreamLog(name, hub.max_len)
        self._order = 0
        #: The subscriptions open now, each with what it reads.
        self.subscribers: dict[MemoryChannelSubscription, MemoryChannel] = {}

    def publish(self, channel: str, payload: bytes, headers: Mapping[str, str]) -> int:
        """Publish; returns how many subscriptions receive it (as ``PUBLISH`` counts
        subscribed clients, a subscription of several matching patterns counted once each)."""
        self._order += 1
        self.log.append(Entry(channel, self.log.next_seq, self._order, 0, payload, headers))
        self._hub.wake()
        return sum(_receivers(source, channel) for source in self.subscribers.values())

    def messages(self, channel: str) -> list[Entry]:
        """What was published to ``channel`` and is still kept, oldest first."""
        log = self.log
        return [e for e in log.slice(log.first_seq, log.next_seq) if e.stream == channel]


def channel_bus(hub: MemoryHub, *, sharded: bool) -> ChannelBus:
    """The hub's bus of classic (or sharded) channels, made at first use."""
    name = "shard channels" if sharded else "channels"
    bus = hub.buses.get(name)
    if bus is None:
        bus = hub.buses[name] = ChannelBus(hub, name)
    assert isinstance(bus, ChannelBus)
    return bus


class MemoryChannelSubscription(SubscriptionSource):
    """Reads the messages of its channels (or patterns) published since it subscribed.

    Settles as the Redis channel does: ack and drop have nothing to settle; a retry publishes a
    copy to the channel the message came on, carrying the retry count and this subscription as
    its target (every subscriber of the channel receives it; the others pass over it); a dead
    letter is published to its channel (or, with ``dead_letter_kind="stream"``, appended to the
    in-process stream by the core).
    """

    seekable = False
    durable_delay = False
    live = True

    def __init__(self, hub: MemoryHub, channel: MemoryChannel, *, label: str, count: int) -> None:
        self._bus = channel_bus(hub, sharded=channel.sharded)
        self._channel = channel
        self._label = label
        self._count = count
        self.read_count = count
        self._next = self._bus.log.next_seq
        self._retry_target: str | None = None

    async def open(self, host: SubscriptionHost) -> None:
        self._retry_target = host.retry_target
        self._bus.subscribers[self] = self._channel
        await checkpoint()

    async def aclose(self) -> None:
        self._bus.subscribers.pop(self, None)
        await checkpoint()

    def _take(self, limit: int) -> list[Delivery]:
        log = self._bus.log
        start = max(self._next, log.first_seq)
        taken: list[Delivery] = []
        matches = self._channel.matches
        seq = start
        for entry in log.slice(start, log.next_seq):
            seq = entry.seq + 1
            if matches(entry.stream):
                taken.append(_deliver(entry))
                if len(taken) == limit:
                    break
        self._next = max(seq, start)
        return taken

    def poll(self) -> Sequence[Delivery]:
        return self._take(self._count)

    def unread(self) -> int:
        log = self._bus.log
        start = max(self._next, log.first_seq)
        matches = self._channel.matches
        pending = [e for e in log.slice(start, log.next_seq) if matches(e.stream)]
        if not pending:  # nothing of ours: step over what others were sent
            self._next = log.next_seq
        return len(pending)

    async def read(self) -> Sequence[Delivery] | None:
        await checkpoint_if_cancelled()
        while True:
            batch = self._take(self._count)
            if batch:  # returned without a schedule point, as the stream reader does
                return batch
            await self._bus._hub.activity.park()

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        if not outcome.consumes:
            self._bus.publish(
                delivery.stream, delivery.payload, retry_headers(delivery, self._retry_target)
            )
        await checkpoint()

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        if self._channel.dead_letter_to_channel:
            self._bus.publish(letter.destination, delivery.payload, letter.headers_for(delivery))
            await checkpoint()
            return True
        await checkpoint()
        return False  # the core appends it to the in-process stream


def _deliver(entry: Entry) -> Delivery:
    headers = entry.headers
    return Delivery(
        entry.stream,
        entry.payload,
        headers,
        attempt=attempt_from_headers(headers) if RETRY_COUNT_HEADER in headers else 1,
        handle=entry,
    )
