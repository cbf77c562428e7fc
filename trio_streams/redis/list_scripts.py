"""The Lua scripts of Redis list subscriptions: the reaper, take-back, renewal and copies.

Each runs atomically on the server, so what it checks and what it moves are one step:

- :data:`REAP` moves a dead consumer's processing list back to the list, whole, only if its
  heartbeat has expired (or, at a consumer's own graceful close, unconditionally). Two reapers
  that race run one after the other: the second finds the processing list empty, so no entry is
  moved twice. Each entry goes back with the handler runs it had there added to its redelivery
  count (the consumer's attempt ledger, :func:`~.lists.attempts_key`: runs by the value's SHA-1;
  an entry no handler started goes back as it was), and the ledger is deleted.
- :data:`TAKE_BACK` does the same, in place, for the entries a consumer restarting under its
  name finds in its own processing list.
- :data:`COPY_THEN_REMOVE` writes a copy (a retry pushed back onto the list, a dead letter onto
  its list or stream) and only then removes the original from the processing list. Unlike
  ``MULTI``/``EXEC``, which runs the ``LREM`` even when the write before it fails (a destination
  that holds another type), the script stops at the failed write: the original stays.

Durable ``retry_after`` (the copy scheduled in the delay ZSET, the original removed, as one
step; the promoter) is shared with streams: :mod:`.delays`.
"""

from __future__ import annotations

from .client.scripts import Script

__all__ = ["COPY_THEN_REMOVE", "COUNTED", "REAP", "RENEW", "TAKE_BACK"]

#: ``counted(v, header, n)``: list entry ``v`` with its redelivery header (``REDELIVERED_HEADER``)
#: ``n`` higher; ``charge(v, runs, header)``: ``v`` charged with the runs the table ``runs`` (by
#: SHA-1, from a ledger) holds for it, taken from it (equal values share a field: the first of them
#: is charged). ``counted`` reads ``v`` exactly as :func:`~.frames.decode_frame` does (the same
#: structural checks, strict UTF-8 names and values, the last of equal names wins), keeps every
#: other header in order and puts the count last; a value that is not a frame becomes the payload of
#: a frame whose one header is the count, so the payload delivered is unchanged.
COUNTED = r"""
local function utf8_ok(s, i, j)
  while i <= j do
    local c = string.byte(s, i)
    if c < 0x80 then
      i = i + 1
    else
      local n, lo, hi = 0, 0x80, 0xBF
      if c >= 0xC2 and c <= 0xDF then n = 1
      elseif c == 0xE0 then n = 2; lo = 0xA0
      elseif c == 0xED then n = 2; hi = 0x9F
      elseif c >= 0xE1 and c <= 0xEF then n = 2
      elseif c == 0xF0 then n = 3; lo = 0x90
      elseif c >= 0xF1 and c <= 0xF3 then n = 3
      elseif c == 0xF4 then n = 3; hi = 0x8F
      else return false end
      if i + n > j then return false end
      local c2 = string.byte(s, i + 1)
      if c2 < lo or c2 > hi then return false end
      for k = i + 2, i + n do
        local ck = string.byte(s, k)
        if ck < 0x80 or ck > 0xBF then return false end
      end
      i = i + n + 1
    end
  end
  return true
end

local function headers_of(v)
  local size = #v
  if size < 4 then return nil end
  local count = struct.unpack('>I4', v)
  if count == 0 then return {}, {}, 5 end
  if count * 8 > size - 4 then return nil end
  local names, values, at = {}, {}, 5
  for h = 1, count do
    if at + 3 > size then return nil end
    local len = struct.unpack('>I4', v, at)
    local name_at = at + 4
    at = name_at + len
    if at + 3 > size then return nil end
    local vlen = struct.unpack('>I4', v, at)
    local value_at = at + 4
    at = value_at + vlen
    if at > size + 1 then return nil end
    if not utf8_ok(v, name_at, name_at + len - 1) then return nil end
    if not utf8_ok(v, value_at, value_at + vlen - 1) then return nil end
    names[h] = string.sub(v, name_at, name_at + len - 1)
    values[h] = string.sub(v, value_at, value_at + vlen - 1)
  end
  return names, values, at
end

local function counted(v, header, n)
  local names, values, payload_at = headers_of(v)
  local payload = v
  if names then payload = string.sub(v, payload_at) else names, values = {}, {} end
  local seen = 0
  local parts = {}
  local kept = 0
  for h = 1, #names do
    if names[h] == header then
      seen = 0
      if string.match(values[h], '^[0-9]+$') then seen = tonumber(values[h]) end
    else
      kept = kept + 1
      parts[#parts + 1] = struct.pack('>I4', #names[h]) .. names[h]
      parts[#parts + 1] = struct.pack('>I4', #values[h]) .. values[h]
    end
  end
  local total = tostring(seen + n)
  parts[#parts + 1] = struct.pack('>I4', #header) .. header .. struct.pack('>I4', #total) .. total
  return struct.pack('>I4', kept + 1) .. table.concat(parts) .. payload
end

local function ledger_of(key)
  local flat = redis.call('HGETALL', key)
  local runs = {}
  for i = 1, #flat, 2 do runs[flat[i]] = tonumber(flat[i + 1]) or 0 end
  return runs
end

local function finished_of(from)
  local done = {}
  for i = from, #ARGV, 2 do done[ARGV[i]] = tonumber(ARGV[i + 1]) or 0 end
  return done
end

local function take_finished(v, done)
  local digest = redis.sha1hex(v)
  local n = done[digest]
  if n and n > 0 then
    done[digest] = n - 1
    return true
  end
  return false
end

local function charge(v, runs, header)
  local digest = redis.sha1hex(v)
  local n = runs[digest]
  if n and n > 0 then
    runs[digest] = 0
    return counted(v, header, n)
  end
  return v
end
"""

#: A processing list holds its newest entry first (entries are moved in at its left), so the script
#: takes it from the left and puts each back at the end consumers take from: the oldest ends up next
#: to be taken, in the order they were first taken. Each goes back with the runs its handlers had
#: there (``charge``: the consumer's ledger), so ``max_attempts`` stops an entry that kills every
#: consumer that runs it, and one that was only read is not charged. Each entry is pushed first and
#: only then removed from the processing list: a list turned into another type stops the script with
#: the entry still in the processing list (a script has no rollback). The ledger is deleted once the
#: processing list is empty. KEYS: list, processing list, heartbeat, consumers set, ledger. ARGV:
#: consumer name, the command that puts an entry back at the end consumers take from (LPUSH/RPUSH),
#: "1" to reap even with a live heartbeat (the consumer's own close), the redelivery header, the
#: closing consumer's heartbeat token (its close leaves alone a name another consumer has taken
#: over), then pairs of a value's SHA-1 and how many of its copies the consumer's handlers had
#: finished (removed, not put back). Returns the entries moved, -1 if still alive, -2 if the name
#: is another consumer's now.
REAP = Script(
    COUNTED
    + """
if ARGV[3] ~= '1' and redis.call('EXISTS', KEYS[3]) == 1 then return -1 end
if ARGV[3] == '1' then
  local owner = redis.call('GET', KEYS[3])
  if owner and owner ~= ARGV[5] then return -2 end
end
local moved = 0
local runs = ledger_of(KEYS[5])
local done = finished_of(6)
local value = redis.call('LINDEX', KEYS[2], 0)
while value do
  if not take_finished(value, done) then
    value = charge(value, runs, ARGV[4])
    redis.call(ARGV[2], KEYS[1], value)
    moved = moved + 1
  end
  redis.call('LPOP', KEYS[2])
  value = redis.call('LINDEX', KEYS[2], 0)
end
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('DEL', KEYS[5])
if ARGV[3] == '1' then redis.call('DEL', KEYS[3]) end
return moved
""",
    purpose="give a dead consumer's entries back to the list",
)

#: Renew a consumer's heartbeat, unless another consumer holds the name now. KEYS: heartbeat,
#: consumers set. ARGV: this consumer's token, TTL ms, its name. Returns 1, or 0 (not ours).
RENEW = Script(
    """
local owner = redis.call('GET', KEYS[1])
if owner and owner ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
redis.call('SADD', KEYS[2], ARGV[3])
return 1
""",
    purpose="renew a consumer's heartbeat",
)

#: What a consumer finds in its own processing list when it opens (it died holding them, and
#: restarts under the same name): each entry charged in place with the runs its handlers had,
#: except the copies its handlers had finished (their removal was not sent when it died), which
#: are removed; newest first, as the list holds them; the ledger deleted. KEYS: processing list,
#: ledger. ARGV: the redelivery header, then pairs of a value's SHA-1 and how many of its copies
#: were finished.
TAKE_BACK = Script(
    COUNTED
    + """
local values = redis.call('LRANGE', KEYS[1], 0, -1)
local runs = ledger_of(KEYS[2])
local done = finished_of(2)
local kept = {}
local changed = false
for _, v in ipairs(values) do
  if take_finished(v, done) then
    changed = true
  else
    local charged = charge(v, runs, ARGV[1])
    if charged ~= v then changed = true end
    kept[#kept + 1] = charged
  end
end
if changed then
  redis.call('DEL', KEYS[1])
  for i = 1, #kept, 1000 do
    redis.call('RPUSH', KEYS[1], unpack(kept, i, math.min(i + 999, #kept)))
  end
end
redis.call('DEL', KEYS[2])
return kept
""",
    purpose="take back the entries of the own processing list",
)

#: KEYS: where the copy goes, processing list. ARGV: the original value, the write's command
#: name (LPUSH/RPUSH/XADD), then its arguments after the key. Returns what LREM removed.
COPY_THEN_REMOVE = Script(
    """
redis.call(ARGV[2], KEYS[1], unpack(ARGV, 3))
return redis.call('LREM', KEYS[2], 1, ARGV[1])
""",
    purpose="copy an entry, then remove it from the processing list",
)
