// The Lua scripts of the fleet's tally (redis-backend.ts runs them). Each limit is a sliding
// log: a sorted set of send ids scored by Redis's own clock (TIME), so "at most N in any W"
// holds across the fleet whatever the sidecars' clocks say. Every script is atomic: a take
// adds its send id to every limit of the rule, or to none. Who is held back, and until when:
// redis-script-holds.ts.
import { GHOST_KEEP_MS, HOLDS } from './redis-script-holds.js'

export { GHOST_KEEP_MS }

// The fleet's tally (the logs, the gates, presence, the latest sends) carries no TTL: a
// volatile-* maxmemory-policy (the managed offerings' default) evicts only keys with one, such
// as the read cache's entries, so memory pressure never drops a budget. A log is pruned by its
// scores at every take; a gate holds until the time it stores (an earlier version's: its TTL).
const CLOCK = `
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local function gateLeft (key)
  local v = tonumber(redis.call('MGET', key)[1])
  if v == nil then return 0 end
  if v < 1e12 then return redis.call('PTTL', key) end
  return v - now
end
-- The tally (KEYS[5], a hash) keeps each log's latest send. A log found empty although its
-- latest send is still in the window was lost (evicted by an allkeys-* policy, deleted): its
-- limit is gated until that send leaves the window, as after a loss of all the data.
local function lostLeft (log, window)
  local last = tonumber(redis.call('HGET', KEYS[5], log))
  if last == nil or last <= now - window or redis.call('EXISTS', log) == 1 then return 0 end
  return last + window - now
end
local function lostLog (log, gate, window)
  local left = lostLeft(log, window)
  if left > 0 and gateLeft(gate) < left then redis.call('SET', gate, now + left) end
  return left
end
-- When a release's window starts: a member counted present may be a process that died without
-- leaving, counted until its entry expires, and renewed by a script still on its way (sent
-- before it died, run by its deadline): out of the count by now + timeout + TTL at the latest.
local function releaseAt (ttl, timeout)
  local last = tonumber(redis.call('ZRANGE', KEYS[2], -1, -1, 'WITHSCORES')[2]) or now
  return math.max(now + ttl + timeout, last)
end
-- Sends added to a log (a take, sends told again): the tally keeps the latest of them.
local function noteLatest (log, at)
  local known = tonumber(redis.call('HGET', KEYS[5], log))
  if known == nil or at > known then redis.call('HSET', KEYS[5], log, at) end
end
` + HOLDS

// Shared by the scripts that renew presence: the caller's deadline (a command that waited in
// a frozen or slow Redis past it does nothing: its sender already gave up on it); the fleet's
// presence (each sidecar renews a member entry, KEYS[2], that lapses after a TTL, and its
// declared size, KEYS[6]). The fleet size the replies tell is RATE_LIMIT_FLEET_SIZE, or the
// sidecars present now if more. A sidecar that lapses instead of leaving is remembered
// (KEYS[3]) and released (KEYS[4]) as above; a released one is forgotten after GHOST_KEEP_MS
// (longer than any window), its declaration noted for the holds (KEYS[7], by floor).
const PRELUDE = CLOCK + `
local function late (deadline) return deadline >= 0 and now > deadline end
local function release (name, floor, at, span)
  if span then span = '~' .. span else span = '' end
  redis.call('ZADD', KEYS[4], at, name .. '@' .. at .. span)
  floor = tonumber(floor)
  if floor ~= nil and floor > 0 and (tonumber(redis.call('HGET', KEYS[7], floor)) or 0) < at then redis.call('HSET', KEYS[7], floor, at) end
end
-- A new run's entry (a restart keeping its id: STATE_DIR) ends at once when nothing was
-- released by the count since it lapsed (then it stands for that run alone): the ledger this
-- script tells holds every send the earlier runs made alone (fleet-alone.ts sends alone only
-- what the file holds). Else it may stand for a released one, still cut off: kept, renamed.
-- So is one an earlier version renewed last (a rollback keeping STATE_DIR): its run sent alone
-- what its file may lack, and left this version's mark (KEYS[9], 'span:expiry') stale.
local function endsWithRun (member, lapsedAt)
  local marked = tonumber(string.match(redis.call('HGET', KEYS[9], member) or '', ':(%d+)$'))
  return marked == tonumber(lapsedAt) and redis.call('ZCOUNT', KEYS[4], '(' .. lapsedAt, '+inf') == 0 and now - tonumber(lapsedAt) < ${GHOST_KEEP_MS}
end
local function presence (member, ttl, floor, timeout, newRun, span)
  local members, lapsed, released = KEYS[2], KEYS[3], KEYS[4]
  local gone = expired()
  for i = 1, #gone, 2 do redis.call('ZADD', lapsed, gone[i + 1], gone[i]) end
  redis.call('ZREMRANGEBYSCORE', members, '-inf', now)
  redis.call('ZREMRANGEBYSCORE', released, '-inf', now - ${GHOST_KEEP_MS})
  -- Back under its own id, the same run tells its sends (REASSERT) or never spent alone
  -- (shared): forgotten. A new run: see endsWithRun; a kept entry stays lapsed under a name of
  -- its own (id#time), until released as any other. A released entry is never taken back:
  -- each has a name of its own (id@time).
  -- Its score, read as ZADD XX INCR 0 (unchanged; nil when absent): not ZSCORE, which a Redis
  -- user granted what earlier versions ran may not have.
  local lapsedAt = redis.call('ZADD', lapsed, 'XX', 'INCR', 0, member)
  if lapsedAt then
    redis.call('ZREM', lapsed, member)
    if newRun > 0 and not (newRun == 2 and endsWithRun(member, lapsedAt)) then
      local entry = member .. '#' .. now
      redis.call('ZADD', lapsed, lapsedAt, entry)
      for _, key in ipairs({KEYS[6], KEYS[9]}) do
        local before = redis.call('HGET', key, member)
        if before then redis.call('HSET', key, entry, before) end
      end
    end
  end
  local ended = timeEnded(widths(true), true)
  redis.call('ZADD', members, now + ttl, member)
  redis.call('HSET', KEYS[6], member, floor)
  -- Marked at every renewal, with no span too ('-': spanIn reads none), for endsWithRun.
  redis.call('HSET', KEYS[9], member, (span > 0 and span or '-') .. ':' .. (now + ttl))
  local present = redis.call('ZCARD', members)
  -- Safe to release by the largest: those running are at most the largest size any of them
  -- declared, and each one counted has its on record (or held, KEYS[8]), so at most
  -- hi − present lapsed ones run. Ended ones (which hold nothing) go first, telling a span of
  -- 0: each one left then holds, and stands for every one released after its lapse.
  local lo, hi = onRecord(floor, true, redis.call('ZCARD', lapsed) > 0)
  local stopped = redis.call('ZCARD', lapsed) - math.max(0, hi - present)
  local endedLeft = #ended
  if hi > 0 and stopped > 0 then
    local at = releaseAt(ttl, timeout)
    local gone = {}
    for i = 1, math.min(stopped, #ended) do gone[i] = {ended[i], 0} end
    endedLeft = #ended - #gone
    local isEnded = {}
    for _, e in ipairs(ended) do isEnded[e] = true end
    local oldest = redis.call('ZRANGE', lapsed, 0, stopped + #ended - 1, 'WITHSCORES')
    for i = 1, #oldest, 2 do
      if #gone < stopped and not isEnded[oldest[i]] then gone[#gone + 1] = {oldest[i], spanOf(oldest[i], oldest[i + 1])} end
    end
    for _, g in ipairs(gone) do
      local f = redis.call('HGET', KEYS[6], g[1])
      release(g[1], f, at, g[2])
      holdSize(f)
      redis.call('ZREM', lapsed, g[1])
      redis.call('HDEL', KEYS[6], g[1])
      redis.call('HDEL', KEYS[9], g[1])
    end
  end
  if redis.call('ZCARD', lapsed) == 0 then redis.call('DEL', KEYS[8]) end
  return present, math.max(present, floor), lo, hi, endedLeft
end
`

// KEYS: epoch, members, lapsed, released, tally, floors, released floors, held sizes, spans,
// cooldown, then (log, gate) per limit.
// ARGV: deadline, member, ttl, floor, epoch expected, send id, then (count, window ms) per
// limit, then the fleet's Redis timeout (ms), the member's span (ms; 0: none).
// Returns {code, ms, fleet size, present, now, smallest and largest size (after presence)}: 0 taken, 1 cooling down, 2 a limit is spent
// (all have room in ms), 3 late (nothing done), 4 a limit is gated after a data loss,
// 5 the epoch is not the one expected (Redis lost or changed its data; nothing done).
// A limit keeps room for what sidecars out of Redis's sight may have spent (heldBack):
// used + 1 + held back <= count.
export const TAKE = PRELUDE + `
if late(tonumber(ARGV[1])) then return {3, 0, 0, 0, now} end
if redis.call('GET', KEYS[1]) ~= ARGV[5] then return {5, 0, 0, 0, now} end
local present, size, lo, hi, ended = presence(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[#ARGV - 1]), 0, tonumber(ARGV[#ARGV]))
local cd = redis.call('PTTL', KEYS[10])
if cd > 0 then return {1, cd, size, present, now, lo or 0, hi} end
local wait, gated = 0, 0
-- Shares held: those of the lapsed entries whose time is not up (an ended one is counted, not held).
local lapsed = redis.call('ZCARD', KEYS[3]) - ended
for i = 11, #KEYS, 2 do
  local count, window = tonumber(ARGV[i - 4]), tonumber(ARGV[i - 3])
  local g = math.max(gateLeft(KEYS[i + 1]), lostLog(KEYS[i], KEYS[i + 1], window))
  if g > gated then gated = g end
  redis.call('ZREMRANGEBYSCORE', KEYS[i], '-inf', now - window)
  local used = redis.call('ZCARD', KEYS[i])
  local held, ends = heldBack(count, window, lo, size, present, lapsed, 0, 0)
  local room = count - held
  if used + 1 > room then
    local w = window
    local leaving = used - room + 1
    if room <= 0 and ends > 0 then w = ends end
    if room > 0 then
      local e = redis.call('ZRANGE', KEYS[i], leaving - 1, leaving - 1, 'WITHSCORES')
      w = tonumber(e[2]) + window - now
    end
    if w > wait then wait = w end
  end
end
if gated > 0 then return {4, gated, size, present, now, lo or 0, hi} end
if wait > 0 then return {2, wait, size, present, now, lo or 0, hi} end
for i = 11, #KEYS, 2 do
  redis.call('ZADD', KEYS[i], now, ARGV[6])
  noteLatest(KEYS[i], now)
end
return {0, 0, size, present, now, lo or 0, hi}
`

// KEYS: epoch, members, lapsed, released, tally, floors, released floors, held sizes, spans,
// then (log, gate) per limit of every rule.
// ARGV: deadline, member, ttl, floor, epoch expected ('' if none yet), new epoch id, a new run
// of this sidecar (this process's first contact: 1, or 2 when the ledger told holds every send
// its earlier runs made alone; 0: not a new run), then per limit: window ms, n, then
// n × (send id, age ms), then the smallest and largest size this sidecar last saw (0: none),
// then the fleet's Redis timeout (ms), the member's span (ms; 0: none).
// Tells Redis this sidecar's open sends again (ZADD GT: the same id never counts twice), and
// registers it present, in one step. If the epoch is missing or another than expected, Redis
// lost its data: every limit is gated for one window (counts in it cannot be trusted), and
// every other sidecar of the fleet counts as lapsed (any may be cut off and spending alone):
// as many as the largest size it saw allows, each held by the sizes it saw (the records
// went with the data; its own size alone would hold a cut-off sidecar of another too little).
// Returns {late (1/0), lost (1/0), fleet size, present, now, epoch, smallest and largest size}.
export const REASSERT = PRELUDE + `
if late(tonumber(ARGV[1])) then return {1, 0, 0, 0, now, ''} end
local epoch = redis.call('GET', KEYS[1])
local lost = 0
if not epoch then
  epoch = ARGV[6] .. ':' .. now
  redis.call('SET', KEYS[1], epoch)
  if ARGV[5] ~= '' then
    lost = 1
    local most = math.max(tonumber(ARGV[4]), tonumber(ARGV[#ARGV - 2]))
    for k = 1, most - 1 do redis.call('ZADD', KEYS[3], now, 'unknown:' .. epoch .. ':' .. k) end
    holdSize(ARGV[4])
  end
elseif ARGV[5] ~= '' and epoch ~= ARGV[5] then
  lost = 1
end
if lost == 1 then
  holdSize(ARGV[#ARGV - 3])
  holdSize(ARGV[#ARGV - 2])
end
local present, size, lo, hi = presence(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[#ARGV - 1]), tonumber(ARGV[7]), tonumber(ARGV[#ARGV]))
local a = 8
for i = 10, #KEYS, 2 do
  local window, n = tonumber(ARGV[a]), tonumber(ARGV[a + 1])
  a = a + 2
  -- A log lost before it is told again would look whole with this sidecar's sends alone.
  lostLog(KEYS[i], KEYS[i + 1], window)
  for j = 1, n do
    local at = now - tonumber(ARGV[a + 1])
    redis.call('ZADD', KEYS[i], 'GT', at, ARGV[a])
    noteLatest(KEYS[i], at)
    a = a + 2
  end
  if lost == 1 and gateLeft(KEYS[i + 1]) < window then redis.call('SET', KEYS[i + 1], now + window) end
end
return {0, lost, size, present, now, epoch, lo or 0, hi}
`

// KEYS: epoch, members, lapsed, released, tally, floors, released floors, held sizes, spans, then the cool-down of each scope. ARGV:
// deadline, member, ttl, floor, epoch expected, the fleet's Redis timeout (ms), the member's span (ms; 0: none). Returns {code, fleet size, present, now, ms left of each cool-down, smallest and largest size}:
// 0 present, 3 late, 5 the epoch is not the one expected. Every sidecar so learns each
// cool-down the fleet holds, and keeps it should Redis go away.
export const HEARTBEAT = PRELUDE + `
if late(tonumber(ARGV[1])) then return {3, 0, 0, now} end
if redis.call('GET', KEYS[1]) ~= ARGV[5] then return {5, 0, 0, now} end
local present, size, lo, hi = presence(ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4]), tonumber(ARGV[#ARGV - 1]), 0, tonumber(ARGV[#ARGV]))
local out = {0, size, present, now}
for i = 10, #KEYS do out[#out + 1] = redis.call('PTTL', KEYS[i]) end
out[#out + 1] = lo or 0
out[#out + 1] = hi
return out
`

// KEYS: epoch, members, lapsed, released, tally, floors, released floors, held sizes, spans, cooldown, then (log, gate) per limit. ARGV: floor, epoch expected, then
// (count, window ms) per limit, then the presence TTL, the fleet's Redis timeout and heartbeat (ms). Read-only (RateLimit fields, the remaining-budget gauges): per
// limit, what the fleet may still send now, counted as TAKE counts it (the shares of absent
// sidecars kept back), and the ms until that grows (a send leaves the window: the oldest while
// there is room, else the one whose exit lets one more in); nothing while cooling down or gated. Returns {code, now, then (left, ms) per limit}: 0, or 5 the epoch.
export const PEEK = CLOCK + `
-- MGET: Redis's GET statistics stay the read cache's own (test/cache/fleet.test.ts counts them).
if redis.call('MGET', KEYS[1])[1] ~= ARGV[2] then return {5, now} end
local present = redis.call('ZCOUNT', KEYS[2], '(' .. now, '+inf')
local floor = tonumber(ARGV[1])
local size = math.max(present, floor)
-- As the next presence() would count them: members expired meanwhile are lapsed, the surplus
-- released (those whose time is up first, counted but not held).
local lapsed = redis.call('ZCARD', KEYS[3]) + #expired() / 2
local ended = #timeEnded(widths(false), false)
local lo, hi = onRecord(floor, false, lapsed > 0)
local releasing = 0
if hi > 0 then releasing = math.max(0, lapsed - math.max(0, hi - present)) end
lapsed = lapsed - math.max(ended, releasing)
-- Released at the next presence, a heartbeat away at most: the latest start, for the reset.
local releasingAt = releaseAt(tonumber(ARGV[#ARGV - 2]), tonumber(ARGV[#ARGV - 1])) + tonumber(ARGV[#ARGV])
local cd = redis.call('PTTL', KEYS[10])
local out = {0, now}
for i = 11, #KEYS, 2 do
  local count, window = tonumber(ARGV[i - 8]), tonumber(ARGV[i - 7])
  local held, ends = heldBack(count, window, lo, size, present, lapsed, releasing, releasingAt)
  local room = count - held
  local used = redis.call('ZCOUNT', KEYS[i], '(' .. (now - window), '+inf')
  -- The send whose exit lets one more in (the oldest while there is room).
  local leaving = redis.call('ZRANGEBYSCORE', KEYS[i], '(' .. (now - window), '+inf', 'WITHSCORES', 'LIMIT', math.max(0, used - room), 1)
  local ms = 0
  if leaving[2] then ms = tonumber(leaving[2]) + window - now end
  -- No room, and no send of the window whose exit would make some: the hold's end, or a window.
  if ms == 0 and room <= used then ms = ends > 0 and ends or window end
  local gate = math.max(gateLeft(KEYS[i + 1]), lostLeft(KEYS[i], window))
  if gate > 0 or cd > 0 then
    out[#out + 1] = 0
    out[#out + 1] = math.max(gate, cd, ms)
  else
    out[#out + 1] = math.max(0, room - used)
    out[#out + 1] = ms
  end
end
return out
`

// KEYS: epoch, members, lapsed, released, tally, floors, released floors, held sizes, spans, then the logs of a rule's limits. ARGV: the
// send id. A send that never reached the upstream.
export const REFUND = CLOCK + `
-- The tally forgets the log's latest (an earlier version's bare ZREM must not look like a loss);
-- the next take notes it again.
for i = 10, #KEYS do
  if redis.call('ZREM', KEYS[i], ARGV[1]) == 1 then redis.call('HDEL', KEYS[5], KEYS[i]) end
end
return 0
`

// KEYS: REFUND's; ARGV: send ids, each leaving now or renewed while it waits (GT: never earlier; re-added if dropped).
export const LEAVING = CLOCK + `
for i = 10, #KEYS do
  for j = 1, #ARGV do if redis.call('ZADD', KEYS[i], 'GT', 'CH', now, ARGV[j]) == 1 then noteLatest(KEYS[i], now) end end
end
`

// KEYS[1] the scope's cool-down (value: its length; PTTL: what is left), KEYS[2] the last
// cool-down's length, kept for twice its length (the backoff window, store.ts nextCooldownMs).
// ARGV: Retry-After ms (-1 for none), base ms, max ms. Returns the ms until the cool-down ends.
export const COOL_DOWN = `
local active = redis.call('PTTL', KEYS[1])
if active < 0 then active = 0 end
local ra = tonumber(ARGV[1])
local len
if ra >= 0 then
  len = math.min(ra, tonumber(ARGV[3]))
  if len <= active then return active end
else
  if active > 0 then return active end
  local previous = tonumber(redis.call('GET', KEYS[2]) or '0')
  if previous > 0 then len = math.min(previous * 2, tonumber(ARGV[3])) else len = math.min(tonumber(ARGV[2]), tonumber(ARGV[3])) end
end
redis.call('SET', KEYS[1], len, 'PX', len)
redis.call('SET', KEYS[2], len, 'PX', len * 2)
return len
`
