"""Durable ``retry_after`` for Redis streams and lists: a ZSET schedule and one promoter.

``retry_after(d)`` puts the retry copy into the delay ZSET of the stream or list, scored by when
it is due (the server's clock), and settles the original (a stream's ``XACK``, a reliable
list's ``LREM`` from the processing list), in one script: either both happen or neither does.
A promoter task per subscription (:class:`Promoter`) runs one Lua script that moves every due
copy back (a stream's ``XADD``, a list's push, then ``ZREM`` of that member) and answers how
long until the next one is due. The script runs atomically, so when every consumer's promoter
runs it, each copy is moved back exactly once. A restart of Redis with persistence keeps the
schedule; nothing is held in the process.

The delay key is the companion ``delayed`` (:func:`~.companions.companion_key`:
``{orders}:delayed`` for ``orders``, ``{eu}.orders:delayed`` for ``{eu}.orders``), in the
key's hash slot whatever its name, so both scripts run in a cluster.

A member is ``<32 hex>|`` (unique, so equal copies stay apart) followed by the copy's fields
(a stream's ``XADD`` fields; a list's one value), each as ``<length>:<bytes>``.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable, Sequence

import trio

from ..core.host import SubscriptionHost
from .client import RedisClient
from .client.errors import RedisError, ReplyError
from .client.scripts import Script
from .companions import companion_key

__all__ = ["PROMOTE", "SCHEDULE", "Promoter", "delay_key", "member"]

#: The longest a promoter waits before looking for due copies again (seconds).
PROMOTE_EVERY = 1.0
#: Copies one promoter pass moves at most.
_PROMOTE_MOST = 100

#: KEYS: delay ZSET, the key the original is settled on (a stream, a processing list; any key
#: of the slot when nothing is settled). ARGV: delay ms, member, how the original is settled
#: (``XACK`` then group and entry id; ``LREM`` then the value; ``""``: nothing to settle).
#: Returns what the settle returned (0 without one).
SCHEDULE = Script(
    """
local now = redis.call('TIME')
local at = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], at, ARGV[2])
if ARGV[3] == 'XACK' then return redis.call('XACK', KEYS[2], ARGV[4], ARGV[5]) end
if ARGV[3] == 'LREM' then return redis.call('LREM', KEYS[2], 1, ARGV[4]) end
return 0
""",
    purpose="schedule a delayed retry",
)

#: KEYS: delay ZSET, stream or list. ARGV: most copies to move, how a copy goes back (``XADD``
#: its fields to a stream; ``LPUSH``/``RPUSH`` its one value onto a list). Returns ms until the
#: next due copy (-1: none scheduled).
PROMOTE = Script(
    """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do
  local fields = {}
  local pos = 34
  while pos <= #m do
    local colon = string.find(m, ':', pos, true)
    local len = tonumber(string.sub(m, pos, colon - 1))
    fields[#fields + 1] = string.sub(m, colon + 1, colon + len)
    pos = colon + len + 1
  end
  if ARGV[2] == 'XADD' then
    redis.call('XADD', KEYS[2], '*', unpack(fields))
  else
    redis.call(ARGV[2], KEYS[2], fields[1])
  end
  redis.call('ZREM', KEYS[1], m)
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then return -1 end
local wait = tonumber(nxt[2]) - ms
if wait < 0 then return 0 end
return wait
""",
    purpose="promote due delayed retries",
)


def delay_key(key: str) -> str:
    """The delay ZSET of stream or list ``key``: its companion ``delayed``, in its slot."""
    return companion_key(key, "delayed")


def member(fields: Sequence[bytes | str]) -> bytes:
    """A unique ZSET member that holds ``fields`` (the copy's ``XADD`` arguments)."""
    parts = [secrets.token_hex(16).encode(), b"|"]
    for value in fields:
        data = value.encode() if isinstance(value, str) else bytes(value)
        parts.append(b"%d:" % len(data))
        parts.append(data)
    return b"".join(parts)


class Promoter:
    """The delayed retries of one subscription: :meth:`schedule` puts a copy in, :meth:`run`
    (a task of the subscription) moves due copies back, its own and every other consumer's.

    ``write`` is how a copy goes back (``XADD``, ``LPUSH``, ``RPUSH``); ``on_wrong_type``, when
    given, is awaited when the script met a key of another type (it raises the error that
    names the key, ending the subscription)."""

    def __init__(
        self,
        client: RedisClient,
        key: str,
        *,
        write: str,
        on_wrong_type: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self._client = client
        self._key = key
        self.delays = delay_key(key)
        self._write = write
        self._on_wrong_type = on_wrong_type
        self._wanted = trio.Event()
        #: Seconds until the promoter looks again.
        self._next_in = 0.0

    async def schedule(
        self, fields: Sequence[bytes | str], delay: float, settle_key: str, *settle: bytes | str
    ) -> None:
        """Put the copy ``fields`` into the delay set, due in ``delay`` s, and settle the
        original on ``settle_key`` in the same step (``settle``: ``"XACK", group, id`` or
        ``"LREM", value``; empty, nothing is settled). A Redis error is raised: then neither
        happened."""
        delay_ms = max(0, round(delay * 1000))
        await self._client.execute(
            "EVAL", SCHEDULE, 2, self.delays, settle_key, delay_ms, member(fields),
            *(settle or ("",)),
        )  # fmt: skip
        if delay < self._next_in:
            self._wanted.set()  # sooner than the promoter planned to look

    async def run(self, host: SubscriptionHost) -> None:
        """Move due copies back, sleeping until the next is due, at most
        :data:`PROMOTE_EVERY` (copies other consumers scheduled are due too). A failure is the
        fault ``delayed``, tried again. Cancelled with the subscription: what is scheduled stays
        in Redis for the next promoter."""
        while True:
            try:
                wait_ms = await self._client.execute(
                    "EVAL", PROMOTE, 2, self.delays, self._key, _PROMOTE_MOST, self._write
                )
            except RedisError as exc:
                if (
                    self._on_wrong_type is not None
                    and isinstance(exc, ReplyError)
                    and exc.code == "WRONGTYPE"
                ):
                    await self._on_wrong_type()
                host.report_fault("delayed", f"promoting delayed retries: {exc}", error=exc)
                wait_ms = -1
            else:
                host.clear_fault("delayed")
                host.answered()  # a failed flush, renewal or heartbeat is over too (host.py)
            wait = PROMOTE_EVERY if wait_ms < 0 else min(PROMOTE_EVERY, wait_ms / 1000)
            self._next_in = wait
            with trio.move_on_after(wait):
                await self._wanted.wait()
            self._wanted = trio.Event()
