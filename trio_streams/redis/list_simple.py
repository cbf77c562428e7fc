"""A simple Redis list subscription: pop, handle, nothing to acknowledge. At-most-once.

- **Reading** pops on a dedicated connection: ``BLPOP`` (``BRPOP`` with ``pop="right"``) for
  ``count=1``, ``BLMPOP ... COUNT n`` for a batch, each waiting at most ``block`` ms.
- **At-most-once.** A popped entry exists only in this process: if the process dies (or a
  blocking pop is cancelled with its reply on the wire) before the handler settles it, the
  entry is **gone**. ``RedisList(key, reliable=True)`` keeps it in a processing list instead.
- **Outcomes.** ack and drop do nothing (the entry is already gone); ``retry`` pushes a copy
  with the retry-count header; ``retry_after`` puts the copy into the durable delay set (a
  promoter pushes it back when due); a dead letter pushes the copy with the reason headers
  onto the dead-letter list (or ``XADD``s it onto a stream, ``dead_letter_kind="stream"``).
- **Faults.** A lost connection is the fault ``connection`` while the reader reconnects
  (paced); a key that holds another type is :class:`~.lists.WrongKeyType`, which stops the
  subscription: no retry would fix it.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ..delivery import Delivery
from ..outcome import Outcome, OutcomeKind
from ..transport import DeadLetter, SourceFault
from .client.errors import RedisConnectionError, RedisError, ReplyError
from .list_base import ListSubscriptionBase, lost, wrong_type

__all__ = ["SimpleListSubscription"]


class SimpleListSubscription(ListSubscriptionBase):
    """Pops entries of one list; see the module docstring."""

    async def read(self) -> Sequence[Delivery] | None:
        key, end, count = self._key, self._end.word, self._count
        if count == 1:
            pop = "BLPOP" if end == "LEFT" else "BRPOP"
            command: tuple[object, ...] = (pop, key, self._block_s)
        else:
            command = ("BLMPOP", self._block_s, 1, key, end, "COUNT", count)
        while True:
            try:
                conn, _ = await self._dedicated.get()
                reply = await conn.execute(*command)
            except ReplyError as exc:
                if lost(exc):
                    await self.connection_lost(exc)
                    continue
                if exc.code == "WRONGTYPE":
                    raise wrong_type(self._label, key, exc) from exc
                raise
            except RedisConnectionError as exc:
                await self.connection_lost(exc)
                continue
            self.read_succeeded()
            if reply is None:
                continue
            values = [reply[1]] if count == 1 else reply[1]
            return [self.delivery(bytes(value), None) for value in values]

    async def settle(self, delivery: Delivery, outcome: Outcome) -> None:
        kind = outcome.kind
        if kind is OutcomeKind.ACK or kind is OutcomeKind.DROP:
            # Popped already: nothing to settle, and no schedule point spent on it (as a
            # stream's ack, which only notes the id for the read's XACK).
            return
        copy = self.retry_copy(delivery)
        try:
            if kind is OutcomeKind.RETRY_AFTER:
                await self.schedule(copy, outcome.delay, self._delays, b"")
            else:
                await self._client.execute(*self.push_copy(copy))
        except RedisError as exc:
            # Popped: nothing keeps the entry now, so a failed copy is a lost message.
            raise SourceFault(
                "settle", f"retry copy of an entry of list {self._key!r} failed (lost): {exc}"
            ) from exc

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        try:
            await self._client.execute(*self.dead_letter_command(delivery, letter))
        except RedisError as exc:
            raise SourceFault(
                "settle",
                f"dead letter of an entry of list {self._key!r} to {letter.destination!r} "
                f"failed (lost): {exc}",
            ) from exc
        return True

    async def aclose(self) -> None:
        self._closed = True
        await self._dedicated.drop(None)
        await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"<SimpleListSubscription {self._label!r} list={self._key!r}>"
