"""A simple Redis list subscription: pop, handle, nothing to acknowledge. At-most-once.

- **Reading** pops on a dedicated connection: ``BLPOP`` (``BRPOP`` with ``pop="right"``) for
  ``count=1``, ``BLMPOP ... COUNT n`` for a batch, each waiting at most ``block`` ms.
- **At-most-once.** A popped entry exists only in this process: if the process dies before
  the handler settles it, the entry is **gone**. A graceful stop loses nothing: a blocking pop
  it cancels is answered first, and what it popped but did not settle (queued, or in a handler
  the stop cancelled) goes back to the list's front, in order.
  ``RedisList(key, reliable=True)`` keeps every entry in a processing list instead.
- **Outcomes.** ack and drop do nothing (the entry is already gone); ``retry`` pushes a copy
  with the retry-count header; ``retry_after`` puts the copy into the durable delay set (a
  promoter pushes it back when due); a dead letter pushes the copy with the reason headers
  onto the dead-letter list (or ``XADD``s it onto a stream, ``dead_letter_kind="stream"``).
- **A refused dead letter** (its key holds another type, the server refuses the write): the
  popped entry, as it was popped, goes back at the front of the list (:data:`PUT_BACK`), after
  the entries put back so before it that were popped before it, so a run of refusals keeps the
  order the entries were popped in; it is handled again. Only if that too fails is it lost.
- **Faults.** A lost connection is the fault ``connection`` while the reader reconnects
  (paced); a key that holds another type is :class:`~.lists.WrongKeyType`, which stops the
  subscription: no retry would fix it.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

import trio

from ..core.delivery import Delivery
from ..core.outcome import Outcome, OutcomeKind
from ..core.reporting import with_cause
from ..core.transport import DeadLetter, SourceFault, Unsettled
from .client import Backoff, Connection
from .client.errors import RedisConnectionError, RedisError, ReplyError, describe_command
from .client.protocol import pack_command
from .client.scripts import Script
from .list_base import ListSubscriptionBase, lost, wrong_type

__all__ = ["SimpleListSubscription"]

_log = logging.getLogger("trio_streams.redis")

#: Beyond the block time, how long a stop waits for the reply of a pop it cancelled (s).
_REPLY_MARGIN = 2.0

#: How many entries put back after a refused dead letter are remembered, to put the next ones
#: behind those of them popped before (and still at the front).
_REMEMBERED_PUT_BACKS = 256

#: Put ``ARGV[1]`` back at the front of list ``KEYS[1]`` (``ARGV[2]``: ``LEFT`` or ``RIGHT``,
#: the end consumers take from), behind the entries at the front that are among ``ARGV[3..]``
#: (put back before it, popped before it), as one step; answers how many it went behind.
PUT_BACK = Script(
    """
local key, value = KEYS[1], ARGV[1]
local earlier, left = {}, #ARGV - 2
for i = 3, #ARGV do earlier[ARGV[i]] = (earlier[ARGV[i]] or 0) + 1 end
local pop, push, index, step = "LPOP", "LPUSH", 0, 1
if ARGV[2] == "RIGHT" then pop, push, index, step = "RPOP", "RPUSH", -1, -1 end
local ahead = 0
while ahead < left do
  local v = redis.call("LINDEX", key, index)
  if not v or not earlier[v] or earlier[v] == 0 then break end
  earlier[v] = earlier[v] - 1
  ahead = ahead + 1
  index = index + step
end
local moved = {}
if ahead > 0 then moved = redis.call(pop, key, ahead) end
redis.call(push, key, value)
for i = #moved, 1, -1 do redis.call(push, key, moved[i]) end
return ahead
""",
    purpose="put an entry back at the front of the list",
)


def _popped(reply: Any, count: int) -> list[bytes]:
    """The values of a ``BLPOP``/``BRPOP`` (``[key, value]``) or ``BLMPOP`` (``[key,
    [values]]``) reply."""
    return [bytes(reply[1])] if count == 1 else [bytes(v) for v in reply[1]]


def _raised(reply: Any, command: tuple[Any, ...], conn: Connection) -> Any:
    if isinstance(reply, ReplyError):
        raise reply.with_context(describe_command(command), conn.address)
    return reply


class SimpleListSubscription(ListSubscriptionBase):
    """Pops entries of one list; see the module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Numbers each popped entry, so what goes back keeps the order it was popped in.
        self._order = itertools.count()
        #: ``(order, value)`` of the deliveries let go unsettled, pushed back at close.
        self._give_back: list[tuple[int, bytes]] = []
        #: ``(order, value)`` of the entries put back after a refused dead letter, latest last.
        self._put_back: deque[tuple[int, bytes]] = deque(maxlen=_REMEMBERED_PUT_BACKS)
        #: Paces dead letters the server keeps refusing (their entries come straight back).
        self._refused = Backoff(0.01, 1.0)

    async def read(self) -> Sequence[Delivery] | None:
        key, end, count = self._key, self._end.word, self._count
        if count == 1:
            pop = "BLPOP" if end == "LEFT" else "BRPOP"
            command: tuple[Any, ...] = (pop, key, self._block_s)
        else:
            command = ("BLMPOP", self._block_s, 1, key, end, "COUNT", count)
        while True:
            try:
                conn, _ = await self._dedicated.get()
                reply = await self._pop(conn, command)
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
            return [
                self.delivery(value, (next(self._order), value)) for value in _popped(reply, count)
            ]

    async def _pop(self, conn: Connection, command: tuple[Any, ...]) -> Any:
        """One blocking pop; its reply.

        Cancelled (a graceful stop cancels the blocked read) after the server may have popped
        entries, with the reply on its way: waits for the reply, shielded, at most the block
        time and a margin, and pushes what it brought back where consumers take from, in its
        order, so a stop loses nothing. Then the cancellation goes on. (A reply that does not
        come within that bound leaves the entries' fate unknown: logged.)"""
        describe = str(command[0])
        with trio.CancelScope(shield=True):  # sent whole, or not at all: never cut in two
            await conn.send_raw(pack_command(command), describe=describe)
        try:
            return _raised(await conn.read_frame(describe=describe), command, conn)
        except trio.Cancelled:
            with trio.CancelScope(shield=True):
                await self._put_back_in_flight(conn, describe)
            raise

    async def _put_back_in_flight(self, conn: Connection, describe: str) -> None:
        values: list[bytes] = []
        with trio.move_on_after(self._block_s + _REPLY_MARGIN) as waiting:
            try:
                reply = await conn.read_frame(describe=describe)
                if reply is not None and not isinstance(reply, RedisError):
                    values = _popped(reply, self._count)
                if values:  # the first popped ends up first again
                    await conn.execute(self._end.push_front, self._key, *reversed(values))
                    _log.info(
                        "%s: put %d entries popped as it stopped back on list %r",
                        self._label, len(values), self._key,
                    )  # fmt: skip
            except RedisError as exc:
                _log.warning(
                    "%s: stopping while %s was answered: %d popped entries of list %r may "
                    "be lost (%s)",
                    self._label, describe, len(values), self._key, with_cause(exc),
                )  # fmt: skip
        if waiting.cancelled_caught:
            _log.warning(
                "%s: stopping: no reply to %s within %.1f s; what it popped from list %r, "
                "if anything, is lost",
                self._label, describe, self._block_s + _REPLY_MARGIN, self._key,
            )  # fmt: skip
        await self._dedicated.drop(None)  # sent untracked: not for the pool again

    async def settle(self, delivery: Delivery, outcome: Outcome) -> bool:
        kind = outcome.kind
        if kind is OutcomeKind.ACK or kind is OutcomeKind.DROP:
            # Popped already: nothing to settle (nothing written), and no schedule point
            # spent on it (as a stream's ack, which only notes the id for the read's XACK).
            return False
        copy = self.retry_copy(delivery)
        try:
            if kind is OutcomeKind.RETRY_AFTER:
                await self.schedule(copy, outcome.delay, self._delays, b"")
            else:
                await self._client.execute(*self.push_copy(copy))
        except RedisError as exc:
            # Popped: nothing keeps the entry now, so a failed copy is a lost message.
            raise SourceFault(
                "settle",
                f"retry copy of an entry of list {self._key!r} failed (lost): {exc}",
                left="the entries were lost",
            ) from exc
        return True

    async def dead_letter(self, delivery: Delivery, letter: DeadLetter) -> bool:
        """Write the letter; if the server refuses it, put the entry back (a fault that says
        so, and the dispatcher's log line with it)."""
        try:
            await self._client.execute(*self.dead_letter_command(delivery, letter))
        except RedisError as exc:
            what = await self._put_back_refused(delivery)  # first: a stop cannot lose it
            # Never a hot loop: the entry is popped and refused again at once otherwise. The
            # pause doubles (to 1 s) for as long as dead letters keep being refused.
            await trio.sleep(self._refused.failed())
            raise SourceFault(
                "settle",
                f"dead letter to {letter.destination!r} of an entry of list {self._key!r} "
                f"failed: {exc}; {what}",
            ) from exc
        self._refused.succeeded()
        return True

    async def _put_back_refused(self, delivery: Delivery) -> str:
        """Put the entry of a refused dead letter back at the front of the list, behind those
        put back before it that were popped before it (:data:`PUT_BACK`); what happened, for
        the fault's message. Shielded, for a bounded time: the entry exists only here, and a
        stop cancelling the settle would lose it."""
        order, value = delivery.handle
        earlier = [v for o, v in self._put_back if o < order]
        with trio.CancelScope(shield=True), trio.move_on_after(_REPLY_MARGIN):
            try:
                await self._client.execute(
                    "EVAL", PUT_BACK, 1, self._key, value, self._end.word, *earlier
                )
            except RedisError as exc:
                return f"putting the entry back on list {self._key!r} failed too (lost): {exc}"
            self._put_back.append((order, value))
            return f"put back at the front of list {self._key!r}"
        return f"putting the entry back on list {self._key!r} got no reply (it may be lost)"

    def unsettled(self, delivery: Delivery, why: Unsettled) -> None:
        """Popped, and let go unsettled (a stop abandoned it, queued or in its handler): kept
        to be pushed back at ``aclose``, so a graceful stop loses nothing. Handled again if
        its handler had begun."""
        del why
        self._give_back.append(delivery.handle)

    async def aclose(self) -> None:
        """Push back, at the front and in the order they were popped, the entries let go
        unsettled; then end the connection. Cancelled (or failing), those entries are lost,
        as a crash loses what it popped: logged."""
        self._closed = True
        given = sorted(self._give_back)
        self._give_back.clear()
        back = [value for _, value in given]
        if back:
            try:
                if self._put_back:  # behind the refused ones put back that were popped before
                    for order, value in given:
                        earlier = [v for o, v in self._put_back if o < order]
                        await self._client.execute(
                            "EVAL", PUT_BACK, 1, self._key, value, self._end.word, *earlier
                        )
                        self._put_back.append((order, value))
                else:
                    await self._client.execute(self._end.push_front, self._key, *reversed(back))
            except RedisError as exc:
                _log.warning(
                    "%s: could not put %d unhandled entries back on list %r (lost): %s",
                    self._label, len(back), self._key, with_cause(exc),
                )  # fmt: skip
            else:
                _log.info(
                    "%s: put %d unhandled entries back on list %r",
                    self._label, len(back), self._key,
                )  # fmt: skip
        await self._dedicated.drop(None)
        await trio.lowlevel.checkpoint()

    def __repr__(self) -> str:
        return f"<SimpleListSubscription {self._label!r} list={self._key!r}>"
