"""What the two forms of a Redis list subscription share: opening, key checks, deliveries,
copies (retries and dead letters), reconnecting and durable delays (:class:`~.delays.Promoter`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from ..core.delivery import RETRY_COUNT_HEADER, Delivery, attempt_from_headers, retry_headers
from ..core.host import SubscriptionHost
from ..core.pipeline import Command
from ..core.transport import DeadLetter, SubscriptionSource
from .client import Backoff, ReadOnlyError, RedisClient, RedisConnectionError
from .client.connection import Connection
from .client.errors import ReplyError
from .dedicated import DedicatedConnection
from .delays import Promoter
from .frames import REDELIVERED_HEADER, decode_frame, encode_frame, take_redeliveries
from .keytypes import check_dead_letter_key, check_key_type
from .lists import DeadLetterKind, ListEnd, RedisList, WrongKeyType
from .wire import encode_fields

__all__ = ["ListSubscriptionBase", "lost", "wrong_type"]


def lost(exc: BaseException) -> bool:
    """Whether ``exc`` means the connection (or the primary) is gone: reconnect and go on."""
    return isinstance(exc, RedisConnectionError | ReadOnlyError)


def wrong_type(label: str, key: str, exc: ReplyError) -> WrongKeyType:
    """The typed error for a ``WRONGTYPE`` reply about ``key``."""
    return WrongKeyType(
        f"{label}: key {key!r} does not hold a list, so it cannot be read as a work queue "
        f"({exc.message}); use another key, or delete this one"
    )


class ListSubscriptionBase(SubscriptionSource):
    """The parts of a list subscription that do not depend on its form."""

    seekable = False
    #: ``retry_after`` is kept by Redis (the delay ZSET, see :mod:`.list_scripts`).
    durable_delay = True
    live = True

    def __init__(
        self,
        client: RedisClient,
        source: RedisList,
        *,
        label: str,
        count: int,
        block_ms: int,
        same_slot: Callable[[str], bool],
    ) -> None:
        self._client = client
        self._source = source
        self._key = source.key
        self._end: ListEnd = source.pop
        self._label = label
        self._count = count
        self.read_count = count
        self._block_s = block_ms / 1000
        self._same_slot = same_slot
        self._host: SubscriptionHost | None = None
        self._dedicated = DedicatedConnection(client, source.key)
        self._backoff = Backoff(0.05, 2.0)
        self._faulted = False
        self._promoter = Promoter(
            client, source.key, write=self._end.push, on_wrong_type=self._promote_met_wrong_type
        )
        self._delays = self._promoter.delays
        self._closed = False

    # ---- opening -----------------------------------------------------------------------------

    async def open(self, host: SubscriptionHost) -> None:
        self._host = host
        # A list is a work queue: whichever consumer takes a retry copy handles it.
        host.retry_target = f"list:{self._key}"
        await self.check_type(self._key)
        await self.check_type(self._delays, "zset", "as the list's delayed retries")
        await check_dead_letter_key(
            self._client, host, self._source.dead_letter_kind.value, label=self._label
        )
        host.start_soon(self._promoter.run, host, name=f"{self._label}: delayed retries")

    async def check_type(self, key: str, kind: str = "list", role: str = "as a work queue") -> None:
        """Refuse, with :class:`WrongKeyType`, a ``key`` that holds something else than a
        ``kind`` (a list, unless said otherwise), naming the key and what it is used as."""
        await check_key_type(self._client, key, kind, label=self._label, role=role)

    # ---- deliveries and copies ---------------------------------------------------------------

    def delivery(self, value: bytes, handle: Any) -> Delivery:
        """The delivery of list entry ``value`` (a frame, or a plain value another producer
        pushed: a headerless payload). Its attempt counts the tries its retry copies carry and
        the times it went back to the list from a consumer that died holding it."""
        return self.delivery_and_runs(value, handle)[0]

    def delivery_and_runs(self, value: bytes, handle: Any) -> tuple[Delivery, int]:
        """:meth:`delivery`, and the runs the entry had at consumers that died holding it."""
        payload, headers = decode_frame(value)
        again = take_redeliveries(headers) if REDELIVERED_HEADER in headers else 0
        attempt = attempt_from_headers(headers) if RETRY_COUNT_HEADER in headers else 1
        delivery = Delivery(self._key, payload, headers, attempt=attempt + again, handle=handle)
        return delivery, again

    def retry_copy(self, delivery: Delivery) -> bytes:
        assert self._host is not None
        return encode_frame(delivery.payload, retry_headers(delivery, self._host.retry_target))

    def push_copy(self, value: bytes) -> Command:
        """Put ``value`` at the back of the list (a retry copy waits its turn)."""
        return (self._end.push, self._key, value)

    def dead_letter_command(self, delivery: Delivery, letter: DeadLetter) -> Command:
        """The command that writes ``letter``: a push onto the dead-letter list (framed, at the
        back as this list's publishers push), or an ``XADD`` onto the dead-letter stream."""
        headers = letter.headers_for(delivery)
        if self._source.dead_letter_kind is DeadLetterKind.STREAM:
            return ("XADD", letter.destination, "*", *encode_fields(delivery.payload, headers))
        return (self._end.push, letter.destination, encode_frame(delivery.payload, headers))

    # ---- faults ------------------------------------------------------------------------------

    async def connection(self) -> tuple[Connection, bool]:
        """The dedicated connection of the reads, and whether it is new (a reconnect)."""
        return await self._dedicated.get()

    async def connection_lost(self, exc: BaseException) -> None:
        """Report the fault ``connection``, drop the connection, pause (paced)."""
        assert self._host is not None
        self._faulted = True
        self._host.report_fault("connection", str(exc), error=exc)
        await self._dedicated.drop(exc)
        await trio.sleep(self._backoff.failed())

    def read_succeeded(self) -> None:
        if self._faulted:
            self._faulted = False
            self._backoff.succeeded()
            assert self._host is not None
            self._host.clear_fault("connection")

    # ---- delayed retries ----------------------------------------------------------------------

    async def schedule(self, copy: bytes, delay: float, processing: str, original: bytes) -> None:
        """Put ``copy`` into the delay set, due in ``delay`` s; remove ``original`` from the
        ``processing`` list in the same step (``original`` b"" for a simple list)."""
        settle = ("LREM", original) if original else ()
        await self._promoter.schedule([copy], delay, processing, *settle)

    async def _promote_met_wrong_type(self) -> None:
        """The promoter met a key of another type: the delay set or the list turned into one."""
        await self.check_type(self._delays, "zset", "as the list's delayed retries")
        await self.check_type(self._key)
