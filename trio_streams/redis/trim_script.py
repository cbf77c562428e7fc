"""The Lua script of the groups trim: add an entry, then trim no further than every group allows.

One script, so the bound and the trim are one atomic step: a group created, read or moved
between them cannot see an entry it needs disappear. The bound is the first entry some group
still needs: for each group (``XINFO GROUPS``), the oldest entry of its pending list
(``XPENDING`` summary: pending entries may be reclaimed, whoever's consumer holds them) and
the first entry after its last-delivered id (``XRANGE (last +``: the first it has not read;
a group at ``0-0`` has read nothing, so the whole stream). A group that has neither pending
nor unread entries needs nothing; a stream with no group has no bound.

The trim then removes what both the user's bound (``MAXLEN`` / ``MINID``) and the groups'
bound allow, and no more: entries below the groups' bound, and of those no more than the
``MAXLEN`` excess (found by an ``XRANGE`` of at most excess + 1 entries, so the cost is that of
what is removed, never of the unread part of the stream). Ids are compared as decimal strings
(length, then text): they are 64-bit numbers a Lua double cannot hold exactly.
"""

from __future__ import annotations

from .client.scripts import Script

__all__ = ["ADD_THEN_TRIM"]

#: KEYS: the stream. ARGV: ``MAXLEN`` or ``MINID``, ``=`` or ``~``, the threshold (a count,
#: or an id ``<ms>-<seq>``), then the entry's fields. Returns the new entry's id.
ADD_THEN_TRIM = Script(
    r"""
local key = KEYS[1]
local strategy, op, threshold = ARGV[1], ARGV[2], ARGV[3]
local id = redis.call('XADD', key, '*', unpack(ARGV, 4))

local function part_less(a, b)
  if #a ~= #b then return #a < #b end
  return a < b
end
local function less(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if ams ~= bms then return part_less(ams, bms) end
  return part_less(aseq, bseq)
end

local bound = nil
for _, group in ipairs(redis.call('XINFO', 'GROUPS', key)) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1]
    elseif group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  local need = nil
  local pending = redis.call('XPENDING', key, name)
  if pending[1] > 0 then need = pending[2] end
  local unread = redis.pcall('XRANGE', key, '(' .. last, '+', 'COUNT', 1)
  if type(unread) == 'table' and #unread > 0 then
    if need == nil or less(unread[1][1], need) then need = unread[1][1] end
  end
  if need ~= nil and (bound == nil or less(need, bound)) then bound = need end
end

if bound == nil then
  redis.call('XTRIM', key, strategy, op, threshold)
elseif strategy == 'MINID' then
  if less(bound, threshold) then threshold = bound end
  redis.call('XTRIM', key, 'MINID', op, threshold)
else
  local excess = redis.call('XLEN', key) - tonumber(threshold)
  if excess > 0 then
    local below = redis.call('XRANGE', key, '-', '(' .. bound, 'COUNT', excess + 1)
    if #below > excess then
      redis.call('XTRIM', key, 'MINID', op, below[excess + 1][1])
    elseif #below > 0 then
      redis.call('XTRIM', key, 'MINID', op, bound)
    end
  end
end
return id
""",
    purpose="add an entry, then trim what every group has acknowledged",
)
