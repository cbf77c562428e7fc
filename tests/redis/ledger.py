"""The kit's ledger (``trio_streams.testing.faults.Ledger``) over one Redis key, with what the
server holds at the end.

Published: the numbers pushed (stream entries ``_payload=<n>``, list frames of ``<n>``), each
recorded before it is pushed. Runs: recorded by the consumers (``tests.redis.ledger_app``) as each
run begins and ends. Settles: the consumers record none, so the check is given what the server
holds — a number still pending (a stream's pending list or not read yet, a list or processing
list) is unsettled, one in the dead-letter key was dead-lettered, the rest were acknowledged.
"""

from __future__ import annotations

from pathlib import Path

from trio_streams.redis.client import RedisClient
from trio_streams.redis.frames import decode_frame
from trio_streams.testing.faults import Ledger, LedgerReport

__all__ = ["KeyLedger"]


class KeyLedger:
    """The ledger at ``path`` of one key: a stream read by group ``g``, or a reliable list."""

    def __init__(self, redis: RedisClient, kind: str, key: str, path: Path) -> None:
        self._redis = redis
        self._kind = kind
        self._key = key
        self.path = path
        self.ledger = Ledger(path)

    async def publish(self, numbers: range) -> None:
        """Record and push ``numbers`` in order, a thousand per pipeline."""
        items = list(numbers)
        for start in range(0, len(items), 1000):
            pipeline = self._redis.pipeline()
            for n in items[start : start + 1000]:
                self.ledger.published(n)
                if self._kind == "stream":
                    pipeline.add("XADD", self._key, "*", "_payload", str(n))
                else:
                    pipeline.add("RPUSH", self._key, bytes(4) + str(n).encode())
            (await pipeline.execute()).raise_first()

    def handled(self) -> int:
        """How many numbers a run has finished so far (no server round trip)."""
        return len(self.ledger.check().handled)

    async def report(self) -> LedgerReport:
        """The ledger checked against what the server still holds and has dead-lettered."""
        return self.ledger.check(
            pending=await self._pending(), dead_lettered=await self._numbers(f"{self._key}.dead")
        )

    async def _numbers(self, key: str) -> set[int]:
        if self._kind == "stream":
            return {
                _payload(fields) for _, fields in await self._redis.execute("XRANGE", key, "-", "+")
            }
        values = await self._redis.execute("LRANGE", key, 0, -1)
        return {int(decode_frame(bytes(v))[0]) for v in values}

    async def _pending(self) -> set[int]:
        """Numbers not settled: a stream's pending entries and those its group has not read
        yet; a list's entries still on it or in a processing list."""
        if self._kind == "stream":
            groups = await self._redis.execute("XINFO", "GROUPS", self._key)
            if not groups:
                return await self._numbers(self._key)
            last = "0-0"
            for group in groups:
                info = (
                    group
                    if isinstance(group, dict)
                    else dict(zip(group[::2], group[1::2], strict=True))
                )
                if info[b"name"] == b"g":
                    last = info[b"last-delivered-id"].decode()
            unread = await self._redis.execute("XRANGE", self._key, f"({last}", "+")
            out = {_payload(fields) for _, fields in unread}
            pending = await self._redis.execute("XPENDING", self._key, "g", "-", "+", 1_000_000)
            for entry_id, *_ in pending:
                [(_, fields)] = await self._redis.execute("XRANGE", self._key, entry_id, entry_id)
                out.add(_payload(fields))
            return out
        out = await self._numbers(self._key)  # still on the list: never taken, or put back
        for key in await self._redis.execute("KEYS", f"*{self._key}*processing*"):
            out |= await self._numbers(key.decode())
        return out


def _payload(fields: list[bytes]) -> int:
    return int(dict(zip(fields[::2], fields[1::2], strict=True))[b"_payload"])
