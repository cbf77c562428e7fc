"""A delivery ledger for the tests: what was published, every handler run, every settle.

Published: the numbers pushed (stream entries ``_payload=<n>``, list frames of ``<n>``). Runs:
the run log the consumers append to as each run begins (``tests.redis.ledger_app``). Settles:
what the server holds at the end — a number still pending (a stream's pending list, a
processing list) is unsettled; one in the dead-letter key was dead-lettered; the rest were
acknowledged. The report is one printed line and a value a test asserts on.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import decode_frame

__all__ = ["Ledger", "LedgerReport"]


@dataclass(frozen=True)
class LedgerReport:
    """What the ledger found, each a set or count of published numbers."""

    published: int
    #: Numbers whose handler ran to its end at least once.
    handled: set[int]
    #: Handler runs begun, per number (a run killed under way included).
    runs: Counter[int]
    #: Numbers settled (acknowledged or dead-lettered) that no handler ever ran: must be none.
    settled_without_run: set[int]
    #: Numbers neither handled nor dead-lettered (and not pending): lost.
    lost: set[int]
    dead_lettered: set[int]
    pending: set[int]
    #: The attempts each run saw, per number, in the order the runs began.
    attempts: dict[int, list[int]] = field(default_factory=dict)

    @property
    def duplicates(self) -> int:
        """Runs beyond the first of each number."""
        return sum(n - 1 for n in self.runs.values() if n > 1)

    def line(self) -> str:
        return (
            f"handled {len(self.handled)}/{self.published}, settled without a run "
            f"{len(self.settled_without_run)}, lost {len(self.lost)}, dead-lettered "
            f"{len(self.dead_lettered)}, pending {len(self.pending)}, duplicates "
            f"{self.duplicates}"
        )


class Ledger:
    """Checks the history of one key (a stream read by group ``g``, or a reliable list)."""

    def __init__(self, redis: RedisClient, kind: str, key: str, runlog: Path) -> None:
        self._redis = redis
        self._kind = kind
        self._key = key
        self.runlog = runlog
        self.published: set[int] = set()

    async def publish(self, numbers: range) -> None:
        """Push ``numbers`` in order, a thousand per pipeline."""
        items = list(numbers)
        for start in range(0, len(items), 1000):
            pipeline = self._redis.pipeline()
            for n in items[start : start + 1000]:
                if self._kind == "stream":
                    pipeline.add("XADD", self._key, "*", "_payload", str(n))
                else:
                    pipeline.add("RPUSH", self._key, bytes(4) + str(n).encode())
            (await pipeline.execute()).raise_first()
        self.published.update(items)

    def runs(self) -> tuple[Counter[int], set[int], dict[int, list[int]]]:
        counts: Counter[int] = Counter()
        done: set[int] = set()
        attempts: dict[int, list[int]] = {}
        if not self.runlog.exists():
            return counts, done, attempts
        for line in self.runlog.read_text().splitlines():
            parts = line.split()
            if parts[:1] == ["run"] and len(parts) >= 3:
                n = int(parts[1])
                counts[n] += 1
                attempts.setdefault(n, []).append(int(parts[2]))
            elif parts[:1] == ["done"] and len(parts) == 2:
                done.add(int(parts[1]))
        return counts, done, attempts

    async def _numbers(self, key: str) -> set[int]:
        if self._kind == "stream":
            reply = await self._redis.execute("XRANGE", key, "-", "+")
            out = set()
            for _, fields in reply:
                pairs = dict(zip(fields[::2], fields[1::2], strict=True))
                out.add(int(pairs[b"_payload"]))
            return out
        values = await self._redis.execute("LRANGE", key, 0, -1)
        return {int(decode_frame(bytes(v))[0]) for v in values}

    async def _pending(self) -> set[int]:
        """Numbers not settled: a stream's pending entries and those its group has not read
        yet; a list's entries still on it or in a processing list."""
        if self._kind == "stream":
            groups = await self._redis.execute("XINFO", "GROUPS", self._key)
            last = "0-0"
            for group in groups or ():
                info = (
                    group
                    if isinstance(group, dict)
                    else dict(zip(group[::2], group[1::2], strict=True))
                )
                if info[b"name"] == b"g":
                    last = info[b"last-delivered-id"].decode()
            if not groups:
                return await self._numbers(self._key)
            out = set()
            for _, fields in await self._redis.execute("XRANGE", self._key, f"({last}", "+"):
                out.add(int(dict(zip(fields[::2], fields[1::2], strict=True))[b"_payload"]))
            pending = await self._redis.execute("XPENDING", self._key, "g", "-", "+", 1_000_000)
            for entry_id, *_ in pending:
                [(_, fields)] = await self._redis.execute("XRANGE", self._key, entry_id, entry_id)
                out.add(int(dict(zip(fields[::2], fields[1::2], strict=True))[b"_payload"]))
            return out
        out = await self._numbers(self._key)  # still on the list: never taken, or put back
        for key in await self._redis.execute("KEYS", f"*{self._key}*processing*"):
            out |= await self._numbers(key.decode())
        return out

    async def report(self) -> LedgerReport:
        counts, done, attempts = self.runs()
        dead = await self._numbers(f"{self._key}.dead")
        pending = await self._pending()
        settled = self.published - pending
        return LedgerReport(
            published=len(self.published),
            handled=done,
            runs=counts,
            settled_without_run={n for n in settled if counts[n] == 0},
            lost=settled - done - dead,
            dead_lettered=dead,
            pending=pending,
            attempts=attempts,
        )
