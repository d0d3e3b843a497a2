// The holds of the fleet's tally, a part of every script that counts the fleet
// (redis-scripts.ts puts it after Redis's clock, `now`). KEYS as there: 2 members, 3 lapsed,
// 4 released, 6 floors, 7 released floors, 8 held sizes, 9 spans.
//
// What a sidecar may have spent alone, out of Redis's sight, is held back (`heldBack`). Only
// a sidecar that was present spends alone (from one window after its presence lapsed), so
// Redis knows each one: it is remembered as lapsed (KEYS[3]) until it comes back and tells
// its sends, and its share stays held (as does each absent one's). At most RATE_LIMIT_FLEET_SIZE
// run at once (the guarantee's first assumption), so of the lapsed ones all but
// RATE_LIMIT_FLEET_SIZE − present have stopped; but what they sent may still be in the window:
// that many, the oldest, are released (KEYS[4]) and each one's share held one more window from
// when no member counted present can still be a dead process (`releaseAt`). Sidecars of one
// fleet may declare different sizes (a rollout that changes it): Redis keeps each declaration
// (`onRecord`), and every script holds and releases by those, never by the caller's alone. A
// release says that one of the lapsed stopped, not which: the sizes released stay held for
// the entries left (KEYS[8]), and after a data loss each sidecar back tells the sizes it saw.
// A hold also ends by time: a sidecar spends alone for at most RATE_LIMIT_ALONE_MAX_MS after
// the send of its last script Redis ran (fleet-alone.ts), so once its presence's end + that
// bound + its longest window (its span, KEYS[9]) has passed, its sends alone are outside every
// window: the entry holds no share from then on (`timeEnded`, marked ENDED for good). It stays
// lapsed, its size on record: past its bound a sidecar refuses but may still run, so it is
// still one of those the count allows, and leaves by coming back or by the count (the ended
// first, telling a span of 0). An earlier version sees a lapsed entry: it holds it. An entry
// may stand for any released by the count with a hold starting after its lapse, and so for
// all those that one stood for: its span is widened to theirs (`widths`); one released with
// none (an earlier version's, or unknown after a loss: they spend alone without end) keeps it
// to the count.

// How long a released sidecar's entry is kept (ms), longer than any window: see `presence`.
export const GHOST_KEEP_MS = 7 * 24 * 60 * 60_000
// How far back in Redis's time each scan of the releases starts again before the last one
// (`widths`): a release made after a step of Redis's clock back by less is still seen.
const CLOCK_STEP_MS = 60_000

export const HOLDS = `
-- Sizes a lapsed entry may stand for besides its own (KEYS[8], a hash: lo, hi): those of the
-- entries released while the lapsed set was not empty. A release says that one of them
-- stopped, not which: the one released may be the one still running, the entry kept the dead
-- one's. Dropped once no entry is lapsed (then none of them can still run unseen).
local function widen (lo, hi, f)
  if f ~= nil and f > 0 then
    if lo == nil or f < lo then lo = f end
    if f > hi then hi = f end
  end
  return lo, hi
end
-- A member's span (KEYS[9]) is stored with the presence expiry it was written with
-- ('span:expiry'; '-:expiry' with none), and honoured only when that is the entry's lapse: an
-- earlier version renewing the same id (a rollback keeping STATE_DIR) leaves it unchanged, stale.
local SCANNED, ENDED = ' scanned', 'ended'
local function spanIn (told, at)
  local span, expiry = string.match(told or '', '^(%d+):(%d+)$')
  if span ~= nil and tonumber(expiry) == tonumber(at) then return tonumber(span) end
  return nil
end
local function spanOf (entry, at) return spanIn(redis.call('HGET', KEYS[9], entry), at) end
-- Each lapsed entry's widest span among the releases scored after its lapse (false: one has
-- none, told in the name: id@time~span), of those scored from the last scan on (SCANNED) and
-- from the first lapse, in one pass. A release scores after its making, so each pair of an
-- entry and a release it may stand for is seen while the entry is lapsed: the scan that first
-- sees an entry lapsed starts before its presence ended. 'apply' stores the spans widened
-- (dropped by false) and this scan's start.
local function widths (apply)
  local from = tonumber(redis.call('HGET', KEYS[9], SCANNED))
  if apply then redis.call('HSET', KEYS[9], SCANNED, now) end
  local l, out = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES'), {}
  if #l == 0 then return out end
  if from == nil or from > now then from = l[2] else from = math.max(from - ${CLOCK_STEP_MS}, tonumber(l[2])) end
  local r = redis.call('ZRANGEBYSCORE', KEYS[4], from, '+inf', 'WITHSCORES')
  if #r == 0 then return out end
  local j, widest = #r, 0
  for i = #l - 1, 1, -2 do
    while widest and j > 0 and tonumber(r[j]) >= tonumber(l[i + 1]) do
      local told = tonumber(string.match(r[j - 1], '~(%d+)$'))
      if told == nil then widest = false elseif told > widest then widest = told end
      j = j - 2
    end
    out[l[i]] = widest
    local span = spanOf(l[i], l[i + 1])
    if apply and span ~= nil and not widest then redis.call('HDEL', KEYS[9], l[i]) end
    if apply and span ~= nil and widest and widest > span then redis.call('HSET', KEYS[9], l[i], widest .. ':' .. l[i + 1]) end
  end
  return out
end
-- Lapsed entries whose sends alone are all out of every window by now (see the top), oldest
-- first: those marked ENDED, and those ending now 'by' the widths not yet stored ('apply'
-- marks them). One lapsed longer than GHOST_KEEP_MS ends only by the count, marked or not:
-- the releases it may stand for may have been pruned unseen (a week of an earlier version).
-- Till then an ended entry holds nothing again: a release after that comes from the ended
-- first, and an ended one's sends alone are out of the windows.
local function timeEnded (by, apply)
  local out = {}
  local l = redis.call('ZRANGE', KEYS[3], 0, -1, 'WITHSCORES')
  for i = 1, #l, 2 do
    local told = redis.call('HGET', KEYS[9], l[i])
    local at, span, wider = tonumber(l[i + 1]), spanIn(told, l[i + 1]), by[l[i]]
    if wider == false then span = nil elseif span ~= nil and wider ~= nil and wider > span then span = wider end
    local mark = tonumber(string.match(told or '', '^ended:(%d+)$'))
    if mark ~= nil and mark == at and wider ~= false and now - at < ${GHOST_KEEP_MS} then
      out[#out + 1] = l[i]
    elseif mark ~= nil then
      if apply then redis.call('HDEL', KEYS[9], l[i]) end
    elseif span ~= nil and at + span <= now and now - at < ${GHOST_KEEP_MS} then
      out[#out + 1] = l[i]
      if apply then redis.call('HSET', KEYS[9], l[i], ENDED .. ':' .. l[i + 1]) end
    end
  end
  return out
end
local function heldSizes (lo, hi)
  -- HGET twice, not HMGET: a Redis user granted what earlier versions ran needs nothing new.
  lo, hi = widen(lo, hi, tonumber(redis.call('HGET', KEYS[8], 'lo')))
  return widen(lo, hi, tonumber(redis.call('HGET', KEYS[8], 'hi')))
end
local function holdSize (f)
  local lo, hi = heldSizes(nil, 0)
  local nlo, nhi = widen(lo, hi, tonumber(f))
  if nlo ~= lo or nhi ~= hi then redis.call('HSET', KEYS[8], 'lo', nlo, 'hi', nhi) end
end
-- The declarations on record (KEYS[6]: each present or lapsed member's RATE_LIMIT_FLEET_SIZE,
-- 0: unset), with the caller's and, while any is lapsed, the sizes its entries may stand for:
-- the smallest set one (nil: none), and the largest. A member spends alone at most
-- ⌊N / its own⌋ ≤ ⌊N / the smallest⌋; one with no record (an earlier version's, or unknown
-- after a loss) is held as the smallest. Records of members neither present nor lapsed (left,
-- or released by an earlier version) are dropped when 'prune'.
local function onRecord (floor, prune, anyLapsed)
  local lo, hi, counted = nil, floor, {}
  if floor > 0 then lo = floor end
  if anyLapsed then lo, hi = heldSizes(lo, hi) end
  for _, key in ipairs({KEYS[2], KEYS[3]}) do
    for _, m in ipairs(redis.call('ZRANGE', key, 0, -1)) do counted[m] = true end
  end
  if prune then
    local spans = redis.call('HGETALL', KEYS[9])
    for i = 1, #spans, 2 do
      if not counted[spans[i]] and spans[i] ~= SCANNED then redis.call('HDEL', KEYS[9], spans[i]) end
    end
  end
  local records = redis.call('HGETALL', KEYS[6])
  for i = 1, #records, 2 do
    local f = tonumber(records[i + 1])
    if not counted[records[i]] then
      if prune then redis.call('HDEL', KEYS[6], records[i]) end
    else
      hi = math.max(hi, f)
      if f > 0 and (lo == nil or f < lo) then lo = f end
    end
  end
  return lo, hi
end
-- The smallest declaration among the members released within the window (KEYS[7]: each
-- floor → its latest release, a few fields), or 'lo' if smaller: the share each one's hold is.
local function releasedFloor (lo, window)
  local r = redis.call('HGETALL', KEYS[7])
  for i = 1, #r, 2 do
    local f = tonumber(r[i])
    if tonumber(r[i + 1]) > now - window and (lo == nil or f < lo) then lo = f end
  end
  return lo
end
-- Members whose presence expired, with their expiry: lapsed from now on, but for one that
-- declared no size (it never spends alone: nothing to hold for it).
local function expired ()
  local gone, out = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', now, 'WITHSCORES'), {}
  for i = 1, #gone, 2 do
    if redis.call('HGET', KEYS[6], gone[i]) ~= '0' then
      out[#out + 1] = gone[i]
      out[#out + 1] = gone[i + 1]
    end
  end
  return out
end
-- What a limit holds back for sidecars out of Redis's sight, given 'lapsed' of them that may
-- still run and 'releasing' released this moment (PEEK's view of what presence() would do:
-- their count, and 'releasingAt' when their window starts), each a share by the smallest size
-- of 'lo' and the window's releases; and the ms until the first released one's part ends (0:
-- none is released).
local function heldBack (count, window, lo, size, present, lapsed, releasing, releasingAt)
  local absent = 0
  if size > present then absent = (size - present) * math.floor(count / size) end
  lo = releasedFloor(lo, window)
  if lo == nil then return absent, 0 end
  local share = math.floor(count / lo)
  local since = '(' .. (now - window)
  local released = redis.call('ZCOUNT', KEYS[4], since, '+inf')
  local first = redis.call('ZRANGEBYSCORE', KEYS[4], since, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  local ends = 0
  if first[2] then ends = tonumber(first[2]) + window - now elseif releasing > 0 then ends = releasingAt + window - now end
  return math.max(absent, lapsed * share) + (released + releasing) * share, ends
end
`
