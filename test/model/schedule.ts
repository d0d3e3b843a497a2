// A whole-path schedule is plain data: bursts of callers, faults, heals and time passing, so a
// shrunk counterexample prints as a list counterexamples.test.ts replays as it is.
import fc from 'fast-check'

export interface RuleModel {
  /** `METHOD PATH` as in RATE_LIMITS. */
  rule: string
  n: number
  windowMs: number
  /** cache= and stale=, when the rule has them. */
  cache?: { freshMs: number, staleMs: number }
}

/**
 * The rules, first match first: the catalog as a user writes it with windows shortened to
 * seconds (1/4h cache=4h stale=1d in production); other products, cached under a budget
 * roomy enough that a failed fetch's waiters can each fetch again; orders, the budget alone.
 */
export const RULES = {
  catalog: { rule: 'GET /v2/store/products/catalog', n: 2, windowMs: 4000, cache: { freshMs: 2000, staleMs: 6000 } },
  items: { rule: 'GET /v2/store/products/**', n: 10, windowMs: 2000, cache: { freshMs: 1000, staleMs: 3000 } },
  orders: { rule: 'GET /v2/store/orders', n: 3, windowMs: 4000 }
} satisfies Record<string, RuleModel>
export type RuleName = keyof typeof RULES
export const CATALOG = RULES.catalog
export const ORDERS = RULES.orders

export const RATE_LIMITS = Object.values(RULES).map((r: RuleModel) =>
  `${r.rule} ${r.n}/${r.windowMs}ms${r.cache === undefined ? '' : ` cache=${r.cache.freshMs}ms stale=${r.cache.staleMs}ms`}`).join('; ')

/** Three keys of the catalog (one budget), a product, and the uncached rule's path. */
export const TARGETS = {
  p1: '/v2/store/products/catalog?page=1',
  p2: '/v2/store/products/catalog?page=2',
  p3: '/v2/store/products/catalog?page=3',
  item: '/v2/store/products/42',
  orders: '/v2/store/orders'
} as const
export type PathKind = keyof typeof TARGETS
export const RULE_OF: Record<PathKind, RuleName> = { p1: 'catalog', p2: 'catalog', p3: 'catalog', item: 'items', orders: 'orders' }
export const ruleModel = (path: PathKind): RuleModel => RULES[RULE_OF[path]]
export const cached = (path: PathKind): boolean => ruleModel(path).cache !== undefined
/** The path a request target at TI is, or undefined. */
export const pathOf = (target: string): PathKind | undefined => (Object.keys(TARGETS) as PathKind[]).find((p) => TARGETS[p] === target)

export interface Caller { s: number, delayMs: number, leaveAfterMs?: number }

export type Command =
  /** Callers of one path, each through sidecar `s`, `delayMs` after the burst starts; all awaited. */
  | { op: 'burst', path: PathKind, callers: Caller[] }
  | { op: 'wait', ms: number }
  /** Until every sidecar shares the budgets through Redis again, the whole fleet present (3 s at most). */
  | { op: 'settle' }
  /** Redis SIGSTOPped until a heal. */
  | { op: 'freeze' }
  /** Redis busy (`DEBUG SLEEP`) for `ms`: every command late. */
  | { op: 'slow', ms: number }
  /** FLUSHALL: budgets, epoch, cache entries and fetch markers gone at once. */
  | { op: 'flush' }
  /** Every cache entry in Redis rewritten in another layout (another version's, mid rolling update), its TTL kept. */
  | { op: 'foreign' }
  /** `maxmemory` just above what Redis holds, an evicting policy, and other entries written (another cache's): keys evicted until a heal. */
  | { op: 'evict', policy: 'volatile-lru' | 'allkeys-lru' }
  /** Sidecar `s` alone cut off from Redis (refused, or a stall) until a heal. */
  | { op: 'partition', s: number, how: 'cut' | 'stall' }
  /** Sidecar `s` closed and started again: with its state (`restart`, a container restart) or as a new pod (`replace`). */
  | { op: 'restart', s: number }
  | { op: 'replace', s: number }
  /** Sidecar `s` replaced by a new pod declaring RATE_LIMIT_FLEET_SIZE one more: old and new declarations side by side. */
  | { op: 'rollout', s: number }
  /** The OAuth API down until a heal; time passes until every token has lapsed. */
  | { op: 'tokenLapse' }
  /** TI answers slowly (over UPSTREAM_TIMEOUT_MS when `ms` is), 5xx, or 429 until a heal. */
  | { op: 'tiSlow', ms: number }
  | { op: 'ti5xx' }
  | { op: 'ti429', retryAfterS: number }
  /** Everything back: Redis thawed and unbounded, proxies forwarding, OAuth and TI answering. */
  | { op: 'heal' }

export type FaultKind =
  | 'freeze' | 'slow' | 'flush' | 'foreign' | 'evict' | 'partition' | 'restart' | 'replace' | 'cycleWhileCut' | 'rollout'
  | 'tokenLapse' | 'tiSlow' | 'ti5xx' | 'ti429' | 'callerLeaves'
export const FAULT_KINDS: FaultKind[] = [
  'freeze', 'slow', 'flush', 'foreign', 'evict', 'partition', 'restart', 'replace', 'cycleWhileCut', 'rollout',
  'tokenLapse', 'tiSlow', 'ti5xx', 'ti429', 'callerLeaves'
]

const sidecarArb = (size: number): fc.Arbitrary<number> => fc.integer({ min: 0, max: size - 1 })

const callerArb = (size: number, leaving = false): fc.Arbitrary<Caller> => fc.record({
  s: sidecarArb(size),
  delayMs: fc.integer({ min: 0, max: 400 }),
  ...(leaving ? { leaveAfterMs: fc.integer({ min: 0, max: 200 }) } : {})
}) as fc.Arbitrary<Caller>

const burstArb = (size: number): fc.Arbitrary<Command> => fc.record({
  op: fc.constant('burst' as const),
  path: fc.constantFrom<PathKind>('p1', 'p1', 'p2', 'p3', 'item', 'orders'),
  callers: fc.array(fc.oneof({ weight: 6, arbitrary: callerArb(size) }, { weight: 1, arbitrary: callerArb(size, true) }), { minLength: 1, maxLength: 6 })
})

/** A sidecar cut off waits out a window (its share is its own only from then), then spends it. */
const spendAlone = (s: number): Command[] => [
  { op: 'wait', ms: ORDERS.windowMs + 1000 },
  { op: 'burst', path: 'orders', callers: [{ s, delayMs: 0 }, { s, delayMs: 0 }] }
]

/** The commands that make one fault kind occur. */
export function commandsOf (kind: FaultKind, size: number): fc.Arbitrary<Command[]> {
  const one = (a: fc.Arbitrary<Command>): fc.Arbitrary<Command[]> => a.map((c) => [c])
  switch (kind) {
    case 'slow': return one(fc.integer({ min: 150, max: 1200 }).map((ms): Command => ({ op: 'slow', ms })))
    case 'evict':
      // Misses of other keys right after: their fetches need the budget the eviction may have taken.
      return fc.tuple(fc.constantFrom('volatile-lru' as const, 'allkeys-lru' as const), callerArb(size), callerArb(size))
        .map(([policy, a, b]): Command[] => [{ op: 'evict', policy }, { op: 'burst', path: 'p2', callers: [a] }, { op: 'burst', path: 'p3', callers: [b] }])
    case 'partition': return one(fc.record({ op: fc.constant('partition' as const), s: sidecarArb(size), how: fc.constantFrom('cut' as const, 'stall' as const) }))
    case 'restart':
    case 'replace': return one(sidecarArb(size).map((s): Command => ({ op: kind, s })))
    case 'cycleWhileCut':
      // Cut off long enough to spend its share of the orders' budget alone, then restarted or
      // replaced before Redis hears of it, then the fleet healed and asked again.
      return fc.tuple(sidecarArb(size), fc.constantFrom('cut' as const, 'stall' as const), fc.constantFrom('restart' as const, 'replace' as const), fc.boolean())
        .map(([s, how, op, spend]): Command[] => [
          { op: 'partition', s, how },
          ...(spend ? spendAlone(s) : []),
          { op, s },
          { op: 'heal' },
          { op: 'settle' },
          { op: 'burst', path: 'orders', callers: Array.from({ length: size * 2 }, (_, i) => ({ s: i % size, delayMs: 0 })) }
        ])
    case 'rollout':
      // Another sidecar rolled out declaring more while one is cut off and spends its share of
      // the orders alone: the new pod's callers then, each share held by its own declaration.
      return fc.tuple(sidecarArb(size), fc.integer({ min: 1, max: size - 1 }))
        .map(([s, k]): Command[] => [
          { op: 'partition', s, how: 'cut' },
          { op: 'rollout', s: (s + k) % size },
          ...spendAlone(s),
          { op: 'burst', path: 'orders', callers: Array.from({ length: ORDERS.n }, () => ({ s: (s + k) % size, delayMs: 0 })) }
        ])
    case 'tiSlow':
      // Callers of a key through one sidecar while TI hangs (or is slow): they wait for one fetch.
      return fc.tuple(fc.constantFrom(300, 1500), sidecarArb(size), fc.integer({ min: 2, max: 6 }))
        .map(([ms, s, n]): Command[] => [{ op: 'tiSlow', ms }, { op: 'burst', path: 'item', callers: Array.from({ length: n }, () => ({ s, delayMs: 0 })) }])
    case 'ti429': return one(fc.constantFrom(1, 2).map((retryAfterS): Command => ({ op: 'ti429', retryAfterS })))
    case 'callerLeaves':
      return one(fc.record({
        op: fc.constant('burst' as const),
        path: fc.constantFrom<PathKind>('p1', 'p2', 'item', 'orders'),
        callers: fc.tuple(callerArb(size, true), fc.array(callerArb(size), { maxLength: 3 })).map(([leaving, others]) => [leaving, ...others])
      }))
    case 'foreign':
      // Callers through every sidecar right after: one without a copy of its own reads Redis's.
      return fc.constantFrom<PathKind>('p1', 'item').map((path): Command[] => [
        { op: 'foreign' }, { op: 'burst', path, callers: Array.from({ length: size }, (_, s) => ({ s, delayMs: 0 })) }
      ])
    case 'tokenLapse':
      // Callers of the catalog right after: the stored answer must stand in for the token.
      return fc.array(callerArb(size), { minLength: 1, maxLength: 3 }).map((callers): Command[] => [{ op: 'tokenLapse' }, { op: 'burst', path: 'p1', callers }])
    default: return one(fc.constant({ op: kind } as Command))
  }
}

/** The fault kind a command is (a restart or replacement while cut off is `cycleWhileCut` as well, decided when it runs). */
export function kindOf (c: Command): FaultKind | undefined {
  if (c.op === 'burst') return c.callers.some((k) => k.leaveAfterMs !== undefined) ? 'callerLeaves' : undefined
  if (c.op === 'wait' || c.op === 'settle' || c.op === 'heal') return undefined
  return c.op
}

/**
 * A schedule: a cold burst of catalog callers over the whole fleet first (every pod asks for
 * the catalog at start), then bursts, time passing, faults and heals, with every kind in
 * `featured` placed at least once (so the file's runs cover every kind whatever the seed).
 */
export function scheduleArb (size: number, featured: FaultKind[], { minSteps = 6, maxSteps = 12 } = {}): fc.Arbitrary<Command[]> {
  const stepArb: fc.Arbitrary<Command[]> = fc.oneof(
    { weight: 8, arbitrary: burstArb(size).map((c) => [c]) },
    { weight: 4, arbitrary: fc.integer({ min: 100, max: 1500 }).map((ms): Command[] => [{ op: 'wait', ms }]) },
    { weight: 2, arbitrary: fc.constant<Command[]>([{ op: 'heal' }]) },
    { weight: 3, arbitrary: fc.constantFrom(...FAULT_KINDS).chain((k) => commandsOf(k, size)) }
  )
  // A featured fault is always generated (nil one time in 10^9) yet shrinks away.
  const featuredArb = (k: FaultKind): fc.Arbitrary<[Command[] | undefined, number]> =>
    fc.tuple(fc.option(commandsOf(k, size), { nil: undefined, freq: 1e9 }), fc.nat())
  // Pods starting together: their callers within a few ms of each other.
  const coldArb = fc.option(fc.array(fc.record({ s: sidecarArb(size), delayMs: fc.integer({ min: 0, max: 20 }) }), { minLength: 3, maxLength: 8 })
    .map((callers): Command => ({ op: 'burst', path: 'p1', callers })), { nil: undefined, freq: 1e9 })
  return fc.tuple(fc.array(stepArb, { minLength: minSteps, maxLength: maxSteps }), fc.tuple(...featured.map(featuredArb)), coldArb)
    .map(([steps, forced, cold]) => {
      const out = [...steps]
      for (const [commands, at] of forced) if (commands !== undefined) out.splice(at % (out.length + 1), 0, commands)
      // After each featured fault, a burst (its effect met by callers) is likely anyway; the cold burst leads.
      return [...(cold === undefined ? [] : [cold]), ...out.flat()]
    })
}

/** The schedule as TypeScript, to paste into counterexamples.test.ts. */
export const scheduleSource = (schedule: Command[]): string =>
  '[\n' + schedule.map((c) => `  ${JSON.stringify(c).replace(/"(\w+)":/g, '$1: ').replace(/"/g, '\'').replace(/,(?=\w|\{)/g, ', ')}`).join(',\n') + '\n]'
