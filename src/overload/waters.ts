// The waters the overload manager sheds at, the costs it counts requests for, and how often it
// samples: each a line of why here, its measurements in docs/overload.md#why-these-numbers.

/** How often live memory is sampled (the timer is unref'd and re-armed after each run). */
export const SAMPLE_MS = 250
/** A request also samples when the last sample is older than this: a burst is seen within it, not a whole SAMPLE_MS later. */
export const ADMISSION_SAMPLE_MS = 25
/** Shedding starts when live memory reaches this fraction of the limit: the rest is the process's own (code, stacks, malloc, free heap pages). */
export const HIGH_WATER = 0.6
/** ...and stops when it falls below this one (hysteresis: no flapping at one threshold). */
export const LOW_WATER = 0.45
/**
 * Shedding also starts when the cgroup's usage (what live memory cannot see: native memory, V8's
 * unused pages) reaches this fraction of the limit with live memory over LOW_WATER, which alone stops it.
 */
export const USAGE_WATER = 0.7
/** What an admitted request's body is counted for, per byte its Content-Length announces, until its answer closes: a burst's heads all arrive before its bodies. */
export const BODY_COST = 2
/**
 * A body is counted up to this length: a shorter one is held whole for a replay (proxy/exchange.ts
 * REPLAY_BODY_MAX_BYTES); a longer one is streamed, so its announced length says nothing of what it holds.
 */
export const COUNTED_BODY_MAX_BYTES = 64 * 1024
/**
 * The last line, per request: admitted only if private memory (RssAnon, what an OOM kill is made
 * of) plus the expected costs of those in flight and its own stays under this fraction of the limit.
 */
export const PRIVATE_WATER = 0.8
/**
 * Connections holding an unfinished head are closed, oldest first, from this fraction of the
 * limit in private memory and the costs in flight up: well below PRIVATE_WATER, as heads keep
 * growing between samples and an admin-port flood can land on them (at 0.7, OOM-killed in 1
 * run of 2 of the hostile schedule that found it; docs/overload.md).
 */
export const CONNECTION_WATER = 0.6
/**
 * Unfinished heads never closed on private memory, the youngest: at most this many, and at
 * most KEPT_HEADS_BYTES of them (keptHeads), and a slow caller among them is a caller. Private
 * memory can stay over CONNECTION_WATER at rest after a flood (malloc keeps it): a lone slow
 * head then begins no closing, no log line, no collection.
 */
export const KEPT_HEADS = 64
/** What the kept heads may hold together, by headCost: 64 heads of the default 16 KiB and 100 fields. */
export const KEPT_HEADS_BYTES = 3 * 1024 * 1024
/** Requests admitted whatever private memory says while fewer are in flight (malloc may keep it high at rest): never shed everything. */
export const PRIVATE_FLOOR_IN_FLIGHT = 8
/** What an admitted request is expected to cost beside its body, until its answer closes, in the sum PRIVATE_WATER bounds. */
export const REQUEST_COST = 32 * 1024
/** The pressure on private memory is over (logged, the gauge, /readyz) once a sample finds the sum this fraction of the limit under PRIVATE_WATER... */
export const PRIVATE_CLEAR = 0.05
/** ...or finds no request shed on it for this long: what says "shedding" must be shedding. */
export const PRIVATE_HOLD_MS = 5_000
/** Every this many bytes of discarded bodies (shed requests, excess connections), a young collection frees what was read. */
export const DISCARD_COLLECT_BYTES = 8 * 1024 * 1024
/** At most one forced full collection this often, and only while the samples say shed. */
export const COLLECT_GAP_MS = 1_000
/**
 * ...and forced collections take at most this share of the time: after one that took d ms, the
 * next waits 9 d at least, up to PRIVATE_HOLD_MS. A collection stops the event loop, /livez
 * included (21–126 ms each at load 6–9 in 128 MiB, 2026-12-02). d is the collection's CPU time
 * (its wall time when shorter): a starved process's or a paused VM's waits are no collecting,
 * and counted would hold the sidecar shedding 9 times as long as it waited.
 */
export const COLLECT_SHARE = 0.1

/**
 * Hysteresis: shed from HIGH_WATER of the limit up, or from USAGE_WATER of the cgroup's usage up
 * with live memory over LOW_WATER, until live memory is below LOW_WATER. No limit (0): never.
 * `usage` is read only when it can matter (not shedding, live memory between the waters);
 * undefined when unknown.
 */
export function shouldShed (shedding: boolean, live: number, limitBytes: number, usage: () => number | undefined = () => undefined): boolean {
  if (limitBytes <= 0) return false
  if (live < LOW_WATER * limitBytes) return false
  if (shedding || live >= HIGH_WATER * limitBytes) return true
  return (usage() ?? 0) >= USAGE_WATER * limitBytes
}

/**
 * What one header string is taken to cost beside its bytes: a V8 string's header and its slot
 * in an array (some 24 bytes measured with bench/listener-costs.ts), rounded up.
 */
export const HEADER_STRING_OVERHEAD_BYTES = 32
/** The shortest header line llhttp takes (`a:` and CRLF): no head of MAX_HEADER_BYTES holds more fields than its bytes allow. */
const SHORTEST_FIELD_BYTES = 4

/**
 * What one unfinished request head holds, by the largest head accepted: the bytes Node keeps
 * and the strings made of them, about twice the head plus the socket's own (31 KiB measured for
 * 15.8 KB heads of a few fields, docs/overload.md), and a name and a value string for each field
 * it may hold: Node's parser fails a head past `server.maxHeadersCount`, MAX_HEADER_COUNT + 1
 * (admission.ts limitHeaderCount). MAX_CONNECTIONS of them should fit beside an idle sidecar.
 */
export function headCost (maxHeaderBytes: number, maxHeaderCount: number): number {
  const fields = Math.min(maxHeaderCount + 1, Math.floor(maxHeaderBytes / SHORTEST_FIELD_BYTES))
  return 2 * maxHeaderBytes + 4 * 1024 + fields * 2 * HEADER_STRING_OVERHEAD_BYTES
}

/** Private memory of an idle sidecar holding its token (bench/RESULTS.md: 35–37 MiB). */
export const IDLE_PRIVATE_BYTES = 40 * 1024 * 1024
/**
 * Unfinished heads at `cost` each, beside an idle sidecar, stay under this fraction of the
 * limit: the rest of it is for an admin-port flood (+21 MiB for 8,060 heads) and what the
 * heads' churn leaves in malloc (docs/overload.md).
 */
export const HEADS_WATER = 0.5

/** How many of the youngest unfinished heads at `cost` each private memory never closes: KEPT_HEADS, fewer for large heads, one at least. */
export function keptHeads (cost: number): number {
  return Math.max(1, Math.min(KEPT_HEADS, Math.floor(KEPT_HEADS_BYTES / cost)))
}

/**
 * How many unfinished heads may be open at once: what fits under HEADS_WATER beside an idle
 * sidecar, at least keptHeads (a limit too small for more still serves some slow callers);
 * 0, no bound, without a limit. By `cost`, so any MAX_HEADER_BYTES and MAX_HEADER_COUNT fits.
 */
export function headsBound (limitBytes: number, cost: number): number {
  if (limitBytes <= 0) return 0
  return Math.max(keptHeads(cost), Math.floor((HEADS_WATER * limitBytes - IDLE_PRIVATE_BYTES) / cost))
}

/** The bound on unfinished heads as the start log and /status say it: a number, or why there is none. */
export function headsBoundNote (limitBytes: number, cost: number): number | string {
  const bound = headsBound(limitBytes, cost)
  return bound > 0 ? bound : 'unbounded: no memory limit known'
}

/**
 * Whether MAX_CONNECTIONS unfinished heads of MAX_HEADER_BYTES fit under the memory limit
 * beside an idle sidecar: heads are no request, so admission never sees them (a warning at
 * start names the settings when they do not).
 */
export function headsFit (limitBytes: number, maxConnections: number, maxHeaderBytes: number, maxHeaderCount: number): boolean {
  return limitBytes <= 0 || maxConnections <= 0 || IDLE_PRIVATE_BYTES + maxConnections * headCost(maxHeaderBytes, maxHeaderCount) <= limitBytes
}

/**
 * The read cache's copies (counted at their measured cost, cache/entries.ts entrySize) take at
 * most this fraction of the limit: beside an idle sidecar's live memory, a full cache stays
 * under LOW_WATER with room for a load, and its private memory under CONNECTION_WATER
 * (docs/overload.md#why-these-numbers). 25.6 MiB at 128 MiB; the default 32 MiB from 160 MiB.
 */
export const CACHE_WATER = 0.2

/** The read cache's bound in force: CACHE_MAX_BYTES, or CACHE_WATER of a smaller limit; CACHE_MAX_BYTES without one. */
export function cacheBound (limitBytes: number, maxBytes: number): number {
  return limitBytes <= 0 ? maxBytes : Math.min(maxBytes, Math.floor(CACHE_WATER * limitBytes))
}
