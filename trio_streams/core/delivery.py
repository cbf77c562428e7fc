"""One received message as the core sees it, and the headers conventions every transport shares."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, overload

from .positions import Position, delivered_position
from .replies import CORRELATION_HEADER, REPLY_TO_HEADER

__all__ = [
    "RETRY_COUNT_HEADER",
    "RETRY_TARGET_HEADER",
    "Delivery",
    "ReadBatch",
    "SequenceDelivery",
    "attempt_from_headers",
    "retry_headers",
]

#: Carried by retry copies on transports that keep no delivery count of their own (stream files,
#: Pub/Sub, streams where a retry is a new entry): how many times the message was tried before.
RETRY_COUNT_HEADER = "x-ruststream-retry-count"
#: Carried by retry copies on transports where every subscription of a stream reads every entry
#: (stream files, in-process fan-out, a Redis stream's other groups): the subscription the copy
#: is for (``<app>/<subscription>``). Every other subscription passes over the copy without
#: handling it; a reader that does not know the header still sees a valid message.
RETRY_TARGET_HEADER = "x-trio-streams-retry-for"

_NO_HEADERS: Mapping[str, str] = {}


class Delivery:
    """A message handed out by a subscription, waiting for its outcome.

    ``handle`` belongs to the transport that made the delivery (a stream entry id, a list
    element, a file offset…): the transport gets the delivery back in ``settle``. ``generation``
    is stamped by the delivery channel; a seek that moves the reader makes older generations stale.
    """

    __slots__ = (
        "attempt",
        "ended",
        "generation",
        "handle",
        "headers",
        "layout_hint",
        "payload",
        "position",
        "stream",
        "timestamp_ms",
    )

    def __init__(
        self,
        stream: str,
        payload: bytes,
        headers: Mapping[str, str] = _NO_HEADERS,
        *,
        position: Position | None = None,
        attempt: int = 1,
        handle: Any = None,
        timestamp_ms: int | None = None,
    ) -> None:
        self.stream = stream
        self.payload = payload
        self.headers = headers
        self.position = position
        #: 1 for the first delivery; counts every delivery of this message, retries included.
        self.attempt = attempt
        self.handle = handle
        #: When the message was written (Unix epoch ms), where the transport records it.
        self.timestamp_ms = timestamp_ms
        self.generation = 0
        #: Set by a transport when the message was not written in its layout (a Redis entry
        #: without ``_payload``): how to write one, added to a decode error's reason.
        self.layout_hint: str | None = None
        #: The core has handed it back to the transport (settle, dead letter or unsettled):
        #: it ends once, even when that call is cancelled halfway.
        self.ended = False

    def __repr__(self) -> str:
        where = f" at {self.position!r}" if self.position is not None else ""
        return (
            f"<Delivery {self.stream!r}{where} attempt={self.attempt} "
            f"{len(self.payload)} bytes, {len(self.headers)} headers>"
        )


# The base class's slot, reached under the property that shadows it in SequenceDelivery.
_POSITION: Any = Delivery.__dict__["position"]


class SequenceDelivery(Delivery):
    """A :class:`Delivery` of the message at sequence ``seq`` of its stream (and ``shard``),
    whose ``position`` is built the first time it is read (then kept).

    Stream files and in-process streams address messages by sequence; most handlers never look
    at a position, and building one costs a good share of a no-op delivery. Read, it equals
    ``delivered_position(seq, stream, shard)``, what an eagerly built delivery holds; set, it
    holds what was set.
    """

    __slots__ = ("seq", "shard")

    def __init__(
        self,
        stream: str,
        payload: bytes,
        headers: Mapping[str, str],
        seq: int,
        shard: int | None,
        attempt: int,
        timestamp_ms: int | None,
        handle: Any = None,
    ) -> None:
        # Delivery.__init__'s work without its keyword parsing (one per message on the hot
        # path): every slot it sets but ``position``, which stays unset until read. A test
        # checks that no slot of Delivery is left out.
        self.stream = stream
        self.payload = payload
        self.headers = headers
        self.attempt = attempt
        self.handle = handle
        self.timestamp_ms = timestamp_ms
        self.generation = 0
        self.ended = False
        self.layout_hint = None
        #: The message's sequence number on its stream, and its shard (None for shard 0).
        self.seq = seq
        self.shard = shard

    @property
    def position(self) -> Position | None:
        """The message's position on its stream (``Position.sequence(seq, stream=...)``)."""
        try:
            position: Position | None = _POSITION.__get__(self, Delivery)
        except AttributeError:  # not read yet
            position = delivered_position(self.seq, self.stream, self.shard)
            _POSITION.__set__(self, position)
        return position

    @position.setter
    def position(self, value: Position | None) -> None:
        _POSITION.__set__(self, value)


class ReadBatch(Sequence[Delivery]):
    """One read's messages as the transport decoded them, queued in the delivery channel as one
    item, each made a :class:`Delivery` only when something needs one.

    Most messages of a replay need nothing but their payload: a first attempt without headers,
    acknowledged by a handler of the payload alone where an ack settles nothing. Building a
    delivery for each, and queueing each on its own, was a good share of such a message's cost.
    A transport returns a batch instead of a list from ``poll``/``read``; the channel queues it
    whole, and hands out its messages one at a time, in order, as deliveries
    (``DeliveryChannel.receive``) or, for a message ``payload_of`` says needs nothing else, as
    its payload alone (``DeliveryChannel.take_payload``). A seek purges what is left of it
    exactly as it purges queued deliveries: the messages not yet taken, each made a delivery to
    be reported.

    ``items`` are the transport's own tuples (a stream file's decoded messages); ``build(item)``
    makes an item's delivery, as the transport would have made it eagerly. ``item[payload_at]``
    is an item's payload as it was written; one that starts with any of ``special`` (an
    envelope of headers) needs its delivery, any other is a first attempt without headers,
    handled with its payload alone. As a sequence (what the driver sees before queueing it) it
    holds ``items[start:end]``, built.
    """

    __slots__ = ("build", "end", "generation", "items", "next", "payload_at", "special")

    def __init__(
        self,
        items: list[Any],
        build: Callable[[Any], Delivery],
        payload_at: int,
        special: tuple[bytes, ...],
        start: int = 0,
        end: int | None = None,
    ) -> None:
        self.items = items
        self.build = build
        self.payload_at = payload_at
        self.special = special
        #: The index of the next message to hand out (the batch's first, until it is queued).
        self.next = start
        self.end = len(items) if end is None else end
        #: Stamped by the channel when it is queued, as a delivery's is.
        self.generation = 0

    def __len__(self) -> int:
        return self.end - self.next

    @overload
    def __getitem__(self, index: int) -> Delivery: ...
    @overload
    def __getitem__(self, index: slice) -> list[Delivery]: ...
    def __getitem__(self, index: int | slice) -> Delivery | list[Delivery]:
        if isinstance(index, slice):
            return [self.made(i) for i in range(self.next, self.end)[index]]
        return self.made(range(self.next, self.end)[index])

    def __iter__(self) -> Iterator[Delivery]:
        return (self.made(i) for i in range(self.next, self.end))

    def made(self, index: int) -> Delivery:
        """The delivery of ``items[index]``, of the batch's generation."""
        delivery = self.build(self.items[index])
        delivery.generation = self.generation
        return delivery

    def part(self, start: int, end: int) -> ReadBatch:
        """Messages ``start`` to ``end`` of this batch (as indexed now), as a batch of their own."""
        return ReadBatch(
            self.items,
            self.build,
            self.payload_at,
            self.special,
            self.next + start,
            self.next + end,
        )

    def take(self) -> Delivery:
        """The next message as a delivery; the batch moves past it."""
        index = self.next
        self.next = index + 1
        return self.made(index)


def attempt_from_headers(headers: Mapping[str, str]) -> int:
    """The delivery count a retry copy carries: 1 + the retry-count header (1 when absent/bad)."""
    raw = headers.get(RETRY_COUNT_HEADER)
    if raw is None:
        return 1
    try:
        count = int(raw)
    except ValueError:
        return 1
    return count + 1 if count >= 0 else 1


def retry_headers(delivery: Delivery, target: str | None = None) -> dict[str, str]:
    """Headers for the retry copy of ``delivery``: as it arrived, with the retry count advanced
    and, given a ``target`` (``SubscriptionHost.retry_target``), the subscription it is for."""
    headers = dict(delivery.headers)
    headers[RETRY_COUNT_HEADER] = str(delivery.attempt)
    if target is not None:
        headers[RETRY_TARGET_HEADER] = target
    return headers


#: Headers a transport adds to retry copies, and those a request carries (its reply address
#: and correlation id); handlers see the headers without them (``producer_headers``), so
#: forwarding a message's headers never forwards "this is a retry", nor "answer this request"
#: (the next stage's value would answer the caller instead of this handler's).
TRANSPORT_HEADERS = frozenset(
    {RETRY_COUNT_HEADER, RETRY_TARGET_HEADER, REPLY_TO_HEADER, CORRELATION_HEADER}
)


def producer_headers(headers: Mapping[str, str]) -> Mapping[str, str]:
    """``headers`` without the transport's own (the retry count and target of a copy, the
    reply address and correlation id of a request)."""
    if (
        RETRY_COUNT_HEADER in headers
        or RETRY_TARGET_HEADER in headers
        or REPLY_TO_HEADER in headers
        or CORRELATION_HEADER in headers
    ):
        return {k: v for k, v in headers.items() if k not in TRANSPORT_HEADERS}
    return headers


def retry_target_of(delivery: Delivery) -> str | None:
    """The subscription a retry copy is for, or None for a message any subscription handles."""
    if delivery.attempt == 1:
        return None  # not a retry copy: the common case costs one comparison
    return delivery.headers.get(RETRY_TARGET_HEADER)
