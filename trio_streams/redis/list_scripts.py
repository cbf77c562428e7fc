"""The Lua scripts of Redis list subscriptions: the reaper, and durable ``retry_after``.

Each runs atomically on the server, so what it checks and what it moves are one step:

- :data:`REAP` moves a dead consumer's processing list back to the list, whole, only if its
  heartbeat has expired (or, at a consumer's own graceful close, unconditionally). Two reapers
  that race run one after the other: the second finds the processing list empty, so no entry is
  moved twice.
- :data:`SCHEDULE` puts a retry copy into the delay ZSET (the shape :mod:`.delays` gives
  streams: scored by when it is due on the server's clock, member ``<32 hex>|<len>:<bytes>``)
  and, for a reliable list, removes the original from the processing list, as one step.
- :data:`COPY_THEN_REMOVE` writes a copy (a retry pushed back onto the list, a dead letter onto
  its list or stream) and only then removes the original from the processing list. Unlike
  ``MULTI``/``EXEC``, which runs the ``LREM`` even when the write before it fails (a destination
  that holds another type), the script stops at the failed write: the original stays.
- :data:`PROMOTE` pushes every due copy back onto the list and removes it from the ZSET, and
  answers how long until the next is due; every consumer's promoter runs it, each copy moves
  once.
"""

from __future__ import annotations

__all__ = ["COPY_THEN_REMOVE", "PROMOTE", "REAP", "SCHEDULE"]

#: A processing list holds its newest entry first (entries are moved in at its left), so the
#: script takes it from the left and puts each back at the end consumers take from: the oldest
#: ends up next to be taken, in the order they were first taken. Each entry moves with one
#: ``LMOVE``, never a pop and then a push: a list turned into another type stops the script
#: with the entry still in the processing list (a script has no rollback).
#: KEYS: list, processing list, heartbeat, consumers set. ARGV: consumer name, the command that
#: puts an entry back at the end consumers take from (LPUSH/RPUSH), "1" to reap even with a
#: live heartbeat (the consumer's own close). Returns the entries moved, -1 if still alive.
REAP = """
if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
local to = 'RIGHT'
if ARGV[2] == 'LPUSH' then to = 'LEFT' end
local moved = 0
while redis.call('LMOVE', KEYS[2], KEYS[1], 'LEFT', to) do
  moved = moved + 1
end
redis.call('SREM', KEYS[4], ARGV[1])
if ARGV[3] == '1' then redis.call('DEL', KEYS[3]) end
return moved
"""

#: KEYS: delay ZSET, processing list (ignored when ARGV[3] is empty). ARGV: delay ms, member,
#: the original value to remove from the processing list ("" for a simple list: nothing to).
SCHEDULE = """
local now = redis.call('TIME')
local at = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[1])
redis.call('ZADD', KEYS[1], at, ARGV[2])
if ARGV[3] ~= '' then return redis.call('LREM', KEYS[2], 1, ARGV[3]) end
return 0
"""

#: KEYS: where the copy goes, processing list. ARGV: the original value, the write's command
#: name (LPUSH/RPUSH/XADD), then its arguments after the key. Returns what LREM removed.
COPY_THEN_REMOVE = """
redis.call(ARGV[2], KEYS[1], unpack(ARGV, 3))
return redis.call('LREM', KEYS[2], 1, ARGV[1])
"""

#: KEYS: delay ZSET, list. ARGV: most copies to move, the push command (LPUSH/RPUSH). Returns
#: ms until the next due copy (-1: none scheduled).
PROMOTE = """
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ms, 'LIMIT', 0, tonumber(ARGV[1]))
for _, m in ipairs(due) do
  local colon = string.find(m, ':', 34, true)
  local len = tonumber(string.sub(m, 34, colon - 1))
  redis.call(ARGV[2], KEYS[2], string.sub(m, colon + 1, colon + len))
  redis.call('ZREM', KEYS[1], m)
end
local nxt = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #nxt == 0 then return -1 end
local wait = tonumber(nxt[2]) - ms
if wait < 0 then return 0 end
return wait
"""
