"""Durable ``retry_after`` for Redis streams: a ZSET schedule and an atomic promoter.

``retry_after(d)`` puts the retry copy into the stream's delay ZSET, scored by when it is due
(the server's clock), and acknowledges the original, in one script: either both happen or
neither does. A promoter task per subscription runs one Lua script that moves every due copy
back to the stream (``XADD``, then ``ZREM`` of that member) and answers how long until the next
one is due. The script runs atomically, so when every consumer's promoter runs it, each copy
is moved back exactly once. A restart of Redis with persistence keeps the schedule; nothing is
held in the process.

The delay key is the stream's companion ``delayed`` (:func:`~.companions.companion_key`:
``{orders}:delayed`` for ``orders``, ``{eu}.orders:delayed`` for ``{eu}.orders``), in the
stream's hash slot whatever its name, so both scripts run in a cluster.

A member is ``<32 hex>|`` (unique, so equal copies stay apart) followed by the copy's ``XADD``
fields, each as ``<length>:<bytes>``.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from .client.scripts import Script
from .companions import companion_key

__all__ = ["PROMOTE", "SCHEDULE", "delay_key", "member"]

#: KEYS: delay ZSET, stream. ARGV: delay ms, member, group, entry id.
SCHEDULE = Script(
    """
local now = redis.call('TIME')
local at = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], at, ARGV[2])
return redis.call('XACK', KEYS[2], ARGV[3], ARGV[4])
""",
    purpose="schedule a delayed retry",
)

#: KEYS: delay ZSET, stream. ARGV: most copies to move. Returns ms until the next due copy
#: (-1: none scheduled).
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
  redis.call('XADD', KEYS[2], '*', unpack(fields))
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
