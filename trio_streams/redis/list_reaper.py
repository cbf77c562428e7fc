"""A reliable list consumer's reaper: the processing lists of dead consumers go back.

Every ``reap_every`` s each consumer's reaper runs one script per other consumer
(:data:`~.list_scripts.REAP`) that, only if that heartbeat has expired, moves the whole
processing list back to the front of the list, atomically: two reapers never move an entry
twice. A dead consumer's runs recorded on this host go to its ledger first, and the copies its
handlers had finished are removed rather than moved (:meth:`~.list_runs.ListRuns.adopt`). A
consumer that stalls longer than its heartbeat may find an entry reaped under it: the entry is
handled again (at-least-once), and its late ``LREM`` removes nothing.

At a graceful close the consumer returns its own processing list the same way, whatever its
heartbeat (:meth:`ListReaper.return_own`).
"""

from __future__ import annotations

import logging
from typing import Any

import trio

from ..core.host import SubscriptionHost
from .client import RedisClient
from .client.errors import RedisError
from .frames import REDELIVERED_HEADER
from .list_heartbeat import ListHeartbeat
from .list_runs import ListRuns
from .list_scripts import REAP
from .lists import RedisList, attempts_key, heartbeat_key, processing_key

__all__ = ["ListReaper"]

_log = logging.getLogger("trio_streams.redis")


class ListReaper:
    """The reaper of consumer ``consumer`` of ``source`` (see the module docstring)."""

    def __init__(
        self,
        client: RedisClient,
        source: RedisList,
        consumer: str,
        heartbeat: ListHeartbeat,
        runs: ListRuns,
        *,
        label: str,
    ) -> None:
        self._client = client
        self._source = source
        self._key = source.key
        self._consumer = consumer
        self._heartbeat = heartbeat
        self._runs = runs
        self._label = label

    async def run(self, host: SubscriptionHost) -> None:
        """Every ``reap_every`` s, move the processing lists of consumers whose heartbeat
        expired back to the list (:meth:`reap`); a failure is the fault ``reap``."""
        while True:
            await trio.sleep(self._source.reap_every)
            try:
                await self.reap()
            except RedisError as exc:
                host.report_fault("reap", f"reaping list {self._key!r}: {exc}", error=exc)
            else:
                host.clear_fault("reap")

    async def reap(self) -> int:
        """One reaper pass: returns how many entries it moved back to the list."""
        members = await self._client.execute("SMEMBERS", self._heartbeat.consumers)
        others = sorted(
            name
            for name in (m.decode() if isinstance(m, bytes) else str(m) for m in members)
            if name != self._consumer
        )
        if not others:
            return 0
        # Consumers whose heartbeat is gone died: their runs recorded on this host go to their
        # ledgers first (the reaper's script is still the one that decides).
        pipeline = self._client.pipeline()
        for name in others:
            pipeline.add("EXISTS", heartbeat_key(self._key, name))
        alive = await pipeline.execute(raise_on_error=True)
        dead: dict[str, list[Any]] = {}
        for name, beating in zip(others, alive, strict=True):
            if not beating:
                dead[name] = await self._runs.adopt(name)
        pipeline = self._client.pipeline()
        for name in others:
            pipeline.add(*self._command(name, force=False), *dead.get(name, ()))
        replies = await pipeline.execute(raise_on_error=True)
        moved = 0
        for name, reply in zip(others, replies, strict=True):
            if isinstance(reply, int) and reply >= 0 and name in dead:
                self._runs.forget_journal(name)
            if isinstance(reply, int) and reply > 0:
                moved += reply
                _log.warning(
                    "%s: consumer %r of list %r is gone (its heartbeat expired): moved its %d "
                    "entries back to the list", self._label, name, self._key, reply,
                )  # fmt: skip
        return moved

    async def return_own(self) -> None:
        """Move this consumer's processing list back to the list now, with the runs it had,
        and remove its heartbeat (a graceful close: nothing waits for a reaper)."""
        await self._client.execute(*self._command(self._consumer, force=True))
        self._runs.forget_journal(self._consumer)

    def _command(self, name: str, *, force: bool) -> tuple[Any, ...]:
        return (
            "EVAL", REAP, 5, self._key, processing_key(self._key, name),
            heartbeat_key(self._key, name), self._heartbeat.consumers,
            attempts_key(self._key, name), name, self._source.pop.push_front,
            "1" if force else "0", REDELIVERED_HEADER, self._heartbeat.token,
        )  # fmt: skip
