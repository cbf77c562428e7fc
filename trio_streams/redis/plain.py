"""Plain stream subscriptions (no consumer group): ``RedisStream(key).replay()`` and
``RedisStream(key).tail()``.

Nothing is acknowledged: like a stream file, the reader keeps its own place (the id of the
last entry it read), and every subscription reads every entry.

- A **replay** reads with ``XRANGE`` from the beginning (or ``start``) in reads of ``count``,
  and ends when a read finds nothing after its place (retry copies appended meanwhile are read
  first).
- A **tail** takes the stream's last id at open, then follows with ``XREAD BLOCK`` on a
  dedicated connection. A lost connection is the fault ``connection`` (health ``degraded``);
  the reader reconnects with the client's backoff and resumes after the last entry it read, so
  nothing is lost and nothing is read twice.
- **Seeking** (``ctx.seeker.seek``): ``Position.beginning()``, ``Position.end()`` (the tip
  now), ``Position.entry(id)`` (that entry included) and ``Position.timestamp(ms)`` (the first
  entry strictly later: an entry id's ms part is its time). ``Position.sequence(n)`` is refused:
  Redis entries are addressed by id. Moving a whole consumer group (``XGROUP SETID``) is a
  broker operation, not a handler's seek.
- **Settles**: ack and drop settle nothing; ``retry`` appends a copy with the retry-count
  header and the subscription as its target; ``retry_after`` waits on the core's timer first.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ..core.delivery import Delivery, attempt_from_headers, retry_headers
from ..core.host import SubscriptionHost
from ..core.outcome import Outcome
from ..core.positions import MAX_SEQUENCE, Position, PositionKind
from ..core.transport import SeekRefused, SubscriptionSource
from .client import Backoff, ReadOnlyError, RedisClient, RedisConnectionError
from .client.errors import RedisError
from .dedicated import DedicatedConnection
from .keytypes import check_dead_letter_key, check_key_type
from .streams import SEQUENCE_REFUSAL, RedisStream
from .wire import (
    Entry,
    decode_fields,
    encode_fields,
    entry_position,
    id_before,
    layout_hint,
    parse_entries,
    parse_read,
)

__all__ = ["PlainSubscription"]

_NO_HEADERS: dict[str, str] = {}


class PlainSubscription(SubscriptionSource):
    """Reads one stream without a group; see the module docstring."""

    seekable = True
    durable_delay = False

    def __init__(
        self, client: RedisClient, stream: RedisStream, *, label: str, count: int, block_ms: int
    ) -> None:
        self._client = client
        self._key = stream.key
        self._start = stream.start
        self._label = label
        self._count = count
        self.read_count = count
        self._block_ms = block_ms
        self.live = not stream.replaying
        #: The id of the last entry read: reading resumes strictly after it.
        self._after = "0-0"
        self._host: SubscriptionHost | None = None
        self._dedicated = DedicatedConnection(client, stream.key)
        self._backoff = Backoff(0.05, 2.0)
        self._faulted = False

    async def open(self, host: SubscriptionHost) -> None:
        self._host = host
        role = "for a replay" if not self.live else "for a tail"
        await check_key_type(self._client, self._key, "stream", label=self._label, role=role)
        await check_dead_letter_key(self._client, host, "stream", label=self._label)
        self._after = await self._place(self._start)

    async def _place(self, position: Position) -> str:
        """The id to read strictly after, to start at ``position``."""
        kind = position.kind
        if kind is PositionKind.BEGINNING:
            await trio.lowlevel.checkpoint()
            return "0-0"
        if kind is PositionKind.END:
            last = parse_entries(
                await self._client.execute("XREVRANGE", self._key, "+", "-", "COUNT", 1)
            )
            return last[0].id if last else "0-0"
        if kind is PositionKind.ENTRY:
            await trio.lowlevel.checkpoint()
            return id_before(position.entry_id)
        if kind is PositionKind.TIMESTAMP:
            await trio.lowlevel.checkpoint()
            assert position.value is not None
            return f"{position.value}-{MAX_SEQUENCE}"
        raise SeekRefused(f"{self._label}: {position!r} {SEQUENCE_REFUSAL}")

    async def seek(self, position: Position) -> None:
        if position.stream is not None and position.stream != self._key:
            raise SeekRefused(
                f"{self._label}: {position!r} names a stream this subscription does not read "
                f"({self._key!r})"
            )
        with trio.fail_after(10):  # bounded: a seek never hangs the driver
            try:
                self._after = await self._place(position)
            except RedisError as exc:
                raise SeekRefused(f"{self._label}: seek to {position!r} failed: {exc}") from exc

    async def read(self) -> Sequence[Delivery] | None:
        if not self.live:
            reply = await self._client.execute(
                "XRANGE", self._key, f"({self._after}", "+", "COUNT", self._count
            )
            entries = parse_entries(reply)
            return self._deliver(entries) if entries else None
        while True:
            try:
                conn, _ = await self._dedicated.get()
                reply = await conn.execute(
                    "XREAD", "COUNT", self._count, "BLOCK", self._block_ms,
                    "STREAMS", self._key, self._after,
                )  # fmt: skip
            except (RedisConnectionError, ReadOnlyError) as exc:
                assert self._host is not None
                self._faulted = True
                self._host.report_fault("connection", str(exc), error=exc)
                await self._dedicated.drop(exc)
                await trio.sleep(self._backoff.failed())  # paced
                continue
            if self._faulted:
                self._faulted = False
                self._backoff.succeeded()
                assert self._host is not None
                self._host.clear_fault("connection")
            found = parse_read(reply).get(self._key)
            if found:
                return self._deliver(found)

    def _deliver(self, entries: list[Entry]) -> list[Delivery]:
        key = self._key
        out: list[Delivery] = []
        for entry in entries:
            if entry.fields is None:
                continue
            payload, headers = decode_fields(entry.fields)
            position, timestamp_ms = entry_position(entry.id, key)
            delivery = Delivery(
                key,
                payload,
                headers or _NO_HEADERS,
                position=position,
                attempt=attempt_from_headers(headers) if headers else 1,
                timestamp_ms=timestamp_ms,
            )
            delivery.layout_hint = None if headers else layout_hint(entry.fields)
            out.append(delivery)
        self._after = entries[-1].id
        return out

    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        if outcome.consumes:  # nothing to acknowledge: nothing written
            return False
        assert self._host is not None
        copy = encode_fields(delivery.payload, retry_headers(delivery, self._host.retry_target))
        await self._client.execute("XADD", self._key, "*", *copy)  # read in its turn
        return True

    async def aclose(self) -> None:
        await self._dedicated.drop(None)
        await trio.lowlevel.checkpoint()
