"""The read of a reliable list consumer: moves into its processing list, its own list first.

- **Nothing lost.** One round trip on a dedicated connection moves up to ``count`` entries
  into this consumer's processing list: a ``BLMOVE`` (waiting at most ``block`` ms) followed,
  in the same write, by ``count - 1`` non-blocking ``LMOVE``s. An entry stays in the
  processing list until its settle removes that exact value (``LREM key 1 value``).
- **Its own list first.** At open, after every reconnect (a blocking move cancelled with its
  reply on the wire closes its connection) and after a settle or flush failed, the consumer
  first reads its own processing list (``LRANGE``) and delivers, oldest first, what it does
  not hold: a restart with the same ``consumer`` name takes back what it had when it died (at
  open, counting each entry as delivered again: :data:`~.list_scripts.TAKE_BACK`).

Each delivery is named by a token (a list may hold equal values); the reader keeps the value
of each token held, and how many deliveries of each value are held.
"""

from __future__ import annotations

import itertools
import logging
from collections import Counter, deque
from typing import Any

from ..core.delivery import Delivery
from .client.connection import Connection
from .client.errors import RedisConnectionError, RedisError, ReplyError
from .frames import REDELIVERED_HEADER
from .list_base import ListSubscriptionBase, lost, wrong_type
from .list_runs import ListRuns
from .list_scripts import TAKE_BACK
from .lists import ListEnd, WrongKeyType
from .window_shell import WindowShell

__all__ = ["ListReader"]

_log = logging.getLogger("trio_streams.redis")


class ListReader:
    """Reads for one reliable list subscription, ``source`` (its connection, faults, key
    checks and deliveries); what it returns has a slot in the window of ``shell``, and its
    value in ``values``."""

    def __init__(
        self,
        source: ListSubscriptionBase,
        shell: WindowShell[int],
        runs: ListRuns,
        values: dict[int, bytes],
        *,
        key: str,
        consumer: str,
        end: ListEnd,
        processing: str,
        attempts: str,
        count: int,
        block_s: float,
        label: str,
    ) -> None:
        self._source = source
        self._shell = shell
        self._runs = runs
        self._key = key
        self._consumer = consumer
        self._processing = processing
        self._attempts = attempts
        self._count = count
        self._label = label
        first = ("BLMOVE", key, processing, end.word, "LEFT", block_s)
        self._moves: list[tuple[Any, ...]] = [first]
        self._moves += [("LMOVE", key, processing, end.word, "LEFT")] * (count - 1)
        self._tokens = itertools.count(1)
        #: The value of each delivery held (read, not yet settled or let go), by token (shared
        #: with the run counts).
        self.values = values
        #: How many deliveries of each value are held (a list may hold equal values).
        self._held: Counter[bytes] = Counter()
        #: While this consumer reads its own processing list: what settles removed meanwhile.
        self._removed_during: Counter[bytes] | None = None
        #: Read the own processing list before moving new entries (at open, after reconnects,
        #: after a failed settle or flush).
        self.rescan = True
        #: Entries of the own processing list still to hand out.
        self._backlog: deque[bytes] = deque()
        #: The next take-back is the first since open: what it finds, this consumer held when
        #: it died (a restart under its name), so each entry is counted as delivered again.
        self._first_take_back = True

    async def read(self) -> list[Delivery]:
        """The next deliveries (never none): reconnects and waits as long as it takes.
        Cancelled, it delivers nothing (what a move took stays in the processing list, taken
        back on the next read)."""
        while True:
            try:
                values = await self._read_once()
            except ReplyError as exc:
                if lost(exc):
                    await self._reconnect(exc)
                    continue
                if exc.code == "WRONGTYPE":
                    await self._wrong_type(exc)
                raise
            except RedisConnectionError as exc:
                await self._reconnect(exc)
                continue
            self._source.read_succeeded()
            if values:
                return self._hand_out(values)

    async def _read_once(self) -> list[bytes]:
        """The values of the next read: the own processing list's first, else moved ones."""
        conn, new = await self._source.connection()
        if new:
            self.rescan = True  # a new connection: the own processing list first
        if self.rescan:
            await self._take_back(conn)
        if self._backlog:
            take = min(self._count, len(self._backlog))
            return [self._backlog.popleft() for _ in range(take)]
        replies = await conn.execute_many(self._moves)
        values: list[bytes] = []
        for reply in replies:
            if isinstance(reply, RedisError):
                raise reply
            if reply is not None:
                values.append(bytes(reply))
        return values

    async def _reconnect(self, exc: BaseException) -> None:
        self.rescan = True
        await self._source.connection_lost(exc)

    async def _wrong_type(self, exc: ReplyError) -> None:
        """Raise :class:`WrongKeyType` naming which key holds another type."""
        for key in (self._key, self._processing):
            try:
                await self._source.check_type(key)
            except WrongKeyType as found:
                raise found from exc
        raise wrong_type(self._label, self._key, exc) from exc

    async def _take_back(self, conn: Connection) -> None:
        """Queue, oldest first, the entries of the own processing list that are not held.

        Settles keep running meanwhile: an entry removed after the server answered (so the
        reply still holds it) is noted in ``_removed_during`` and not queued. Cancelled, it
        queues nothing (the entries stay in the processing list; the next read looks again)."""
        self._removed_during = Counter()
        try:
            if self._first_take_back:  # nothing is held yet: charge the runs they had
                done = await self._runs.adopt(self._consumer)
                values = await conn.execute(
                    "EVAL", TAKE_BACK, 2, self._processing, self._attempts, REDELIVERED_HEADER,
                    *done,
                )  # fmt: skip
                self._first_take_back = False
                self._runs.took_back_own()  # what a predecessor recorded is charged now
            else:
                values = await conn.execute("LRANGE", self._processing, 0, -1)
            removed = self._removed_during
        finally:
            self._removed_during = None
        self.rescan = False
        self._backlog.clear()
        spare = Counter(bytes(v) for v in values)
        spare.subtract(self._held)
        spare.subtract(removed)
        for raw in reversed(values):  # the newest first in the list: hand out the oldest first
            value = bytes(raw)
            if spare[value] > 0:
                spare[value] -= 1
                self._backlog.append(value)
        if self._backlog:
            _log.info(
                "%s: taking back %d entries of processing list %r",
                self._label, len(self._backlog), self._processing,
            )  # fmt: skip

    def _hand_out(self, values: list[bytes]) -> list[Delivery]:
        out: list[Delivery] = []
        tokens: list[int] = []
        held, stored = self._held, self.values
        runs = self._runs
        let_go = runs.let_go_runs
        for value in values:
            token = next(self._tokens)
            stored[token] = value
            held[value] += 1
            tokens.append(token)
            delivery, again = self._source.delivery_and_runs(value, token)
            if let_go and let_go[value] > 0:  # taken back: the runs it had in this process
                taken = runs.taken_back(token, value)
                delivery.attempt += taken
                again += taken
            if again:
                runs.suspects.add(token)
            out.append(delivery)
        self._shell.read(tokens)
        return out

    def release(self, token: int, *, removed: bool) -> None:
        """``token`` is no longer held (``removed``: a settle removed its entry from the
        processing list, so a take-back under way must not queue it)."""
        value = self.values.pop(token, None)
        if value is None:
            return
        held = self._held
        held[value] -= 1
        if held[value] <= 0:
            del held[value]
        if removed and self._removed_during is not None:
            self._removed_during[value] += 1
