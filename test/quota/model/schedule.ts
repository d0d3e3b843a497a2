// A schedule is plain data: a list of commands (calls, faults, heals, time passing), so a
// shrunk counterexample prints as a list that counterexamples.test.ts replays as it is.
import fc from 'fast-check'

/** The request paths callers use; which rule each one counts against is the config's. */
export const PATHS = {
  catalog: '/v2/store/products/catalog',
  item: '/v2/store/products/42',
  orders: '/v2/store/orders',
  /** Under a rule with cache= (the read cache): a hit reaches nobody. */
  cached: '/v2/store/products/list',
  /** Under no rule. */
  free: '/v2/other'
} as const
export type PathKind = keyof typeof PATHS

export interface LimitModel { n: number, windowMs: number }
export interface RuleModel {
  /** `METHOD PATH` as in RATE_LIMITS. */
  rule: string
  /** The paths whose FIRST matching rule this is (the sidecar's first-match semantics). */
  paths: PathKind[]
  limits: LimitModel[]
  /** The read cache's options, as written after the limits (`cache=600ms stale=3s`). */
  cache?: string
}

export interface FleetConfig {
  size: number
  rules: RuleModel[]
  /** Extra environment (RATE_LIMIT_COOLDOWN_MS, for one). */
  env?: Record<string, string>
  /** Sidecar `i`'s own environment besides (a size or a bound of its own), kept by its restarts. */
  sidecarEnv?: (i: number) => Record<string, string>
  /**
   * false: G2 is not judged (sidecars declaring a size above the fleet's hold the absent
   * shares by design, so the model's room is not theirs); G1, G3 and the rest still are.
   */
  judgeLiveness?: boolean
}

export const rateLimitsOf = (rules: RuleModel[]): string =>
  rules.map((r) => `${r.rule} ${r.limits.map((l) => `${l.n}/${l.windowMs}ms`).join(' ')}${r.cache === undefined ? '' : ` ${r.cache}`}`).join('; ')

/**
 * The rules of the generated runs: a tiny rule (share 0 across 2–3 sidecars), a cached rule
 * (its hits must reach nobody, its stale answers stand in for refusals) and a rule of two limits.
 */
export const MODEL_FLEET: Omit<FleetConfig, 'size'> = {
  rules: [
    { rule: 'GET /v2/store/products/catalog', paths: ['catalog'], limits: [{ n: 1, windowMs: 2000 }] },
    { rule: 'GET /v2/store/products/list', paths: ['cached'], limits: [{ n: 2, windowMs: 2000 }], cache: 'cache=1500ms stale=3s' },
    { rule: 'GET /v2/store/**', paths: ['item', 'orders'], limits: [{ n: 4, windowMs: 1000 }, { n: 6, windowMs: 2000 }] }
  ],
  // Cool-downs on: TI's 429 is one of the generated faults.
  env: { RATE_LIMIT_COOLDOWN_MS: '500' }
}

export type Command =
  /** A call through sidecar `s`; `leaveAfterMs`: the caller gives up then; `retryAfterS`: the upstream answers it 429 with that Retry-After. */
  | { op: 'call', s: number, path: PathKind, leaveAfterMs?: number, retryAfterS?: number }
  | { op: 'wait', ms: number }
  /** Redis SIGSTOPped until a heal. */
  | { op: 'freeze' }
  /** Redis busy (`DEBUG SLEEP`) for `ms`, longer than RATE_LIMIT_REDIS_TIMEOUT_MS: late answers. */
  | { op: 'slow', ms: number }
  /** Redis killed; started again, empty, by a heal. */
  | { op: 'down' }
  | { op: 'restartEmpty' }
  | { op: 'restartWithData' }
  /** Sidecar `s` alone cut off from Redis: its proxy forwards nothing, or refuses. */
  | { op: 'stall', s: number }
  | { op: 'cut', s: number }
  /** `requirepass` set at runtime and every connection closed: reconnects get NOAUTH. */
  | { op: 'wrongPassword' }
  | { op: 'restartSidecar', s: number }
  /** The upstream refuses connections (nothing reaches TI) until a heal. */
  | { op: 'upstreamDown' }
  /** Everything back: Redis thawed or started (empty), proxies forwarding, password cleared, upstream listening. */
  | { op: 'heal' }
  /** Time passing until every sidecar says it answers through Redis again (at most 5 s): "the moment Redis answers again". */
  | { op: 'settle' }

export type FaultKind = Exclude<Command['op'], 'call' | 'wait' | 'heal' | 'settle'> | 'ti429' | 'callerLeaves'
export const FAULT_KINDS: FaultKind[] = [
  'freeze', 'slow', 'down', 'restartEmpty', 'restartWithData', 'stall', 'cut', 'wrongPassword',
  'restartSidecar', 'upstreamDown', 'ti429', 'callerLeaves'
]

export function kindOf (c: Command): FaultKind | undefined {
  if (c.op === 'call') return c.retryAfterS !== undefined ? 'ti429' : c.leaveAfterMs !== undefined ? 'callerLeaves' : undefined
  if (c.op === 'wait' || c.op === 'heal' || c.op === 'settle') return undefined
  return c.op
}

const sidecarArb = (size: number): fc.Arbitrary<number> => fc.integer({ min: 0, max: size - 1 })

const callArb = (size: number): fc.Arbitrary<Command> => fc.record({
  op: fc.constant('call' as const),
  s: sidecarArb(size),
  path: fc.constantFrom<PathKind>('catalog', 'item', 'item', 'orders', 'cached', 'cached', 'cached', 'free')
})

/** One command of the kind named, with generated details. */
export function commandOf (kind: FaultKind, size: number): fc.Arbitrary<Command> {
  switch (kind) {
    case 'ti429':
      return fc.record({ op: fc.constant('call' as const), s: sidecarArb(size), path: fc.constantFrom<PathKind>('catalog', 'item', 'orders', 'cached'), retryAfterS: fc.integer({ min: 1, max: 2 }) })
    case 'callerLeaves':
      return fc.record({ op: fc.constant('call' as const), s: sidecarArb(size), path: fc.constantFrom<PathKind>('catalog', 'item', 'orders', 'cached'), leaveAfterMs: fc.integer({ min: 0, max: 30 }) })
    case 'slow':
      return fc.integer({ min: 150, max: 600 }).map((ms): Command => ({ op: 'slow', ms }))
    case 'stall':
    case 'cut':
    case 'restartSidecar':
      return sidecarArb(size).map((s): Command => ({ op: kind, s }))
    default:
      return fc.constant({ op: kind } as Command)
  }
}

/**
 * A schedule: mostly calls and time passing, faults and heals among them, with every
 * kind in `featured` placed at least once (so that the file's runs cover every fault).
 */
export function scheduleArb (size: number, featured: FaultKind[], { minSteps = 8, maxSteps = 16 } = {}): fc.Arbitrary<Command[]> {
  const stepArb: fc.Arbitrary<Command> = fc.oneof(
    { weight: 8, arbitrary: callArb(size) },
    { weight: 4, arbitrary: fc.integer({ min: 50, max: 1200 }).map((ms): Command => ({ op: 'wait', ms })) },
    { weight: 2, arbitrary: fc.constant<Command>({ op: 'heal' }) },
    { weight: 2, arbitrary: fc.constantFrom(...FAULT_KINDS).chain((k) => commandOf(k, size)) }
  )
  // A featured command is always generated (nil one time in 10^9) yet shrinks away
  // (fc.option shrinks to nil), so a counterexample keeps only the faults it needs.
  const featuredArb = (k: FaultKind): fc.Arbitrary<[Command | undefined, number]> =>
    fc.tuple(fc.option(commandOf(k, size), { nil: undefined, freq: 1e9 }), fc.nat())
  // Two calls of the cached rule through one sidecar, first thing, while the fleet is healthy:
  // the second is a hit (so the file's runs meet the read cache whatever the seed; a pair at
  // a random place mostly fell inside a fault, where the budget refuses the first).
  const cachedPairArb: fc.Arbitrary<Command[] | undefined> =
    fc.option(sidecarArb(size).map((s): Command[] => [{ op: 'call', s, path: 'cached' }, { op: 'call', s, path: 'cached' }]), { nil: undefined, freq: 1e9 })
  return fc.tuple(
    fc.array(stepArb, { minLength: minSteps, maxLength: maxSteps }),
    fc.tuple(...featured.map(featuredArb)),
    cachedPairArb
  ).map(([steps, forced, pair]) => {
    const out = [...steps]
    for (const [command, at] of forced) if (command !== undefined) out.splice(at % (out.length + 1), 0, command)
    if (pair !== undefined) out.unshift(...pair)
    return out
  })
}

/** The schedule as TypeScript, to paste into counterexamples.test.ts. */
export const scheduleSource = (schedule: Command[]): string =>
  '[\n' + schedule.map((c) => `  ${JSON.stringify(c).replace(/"(\w+)":/g, '$1: ').replace(/"/g, '\'').replace(/,(?=\w)/g, ', ')}`).join(',\n') + '\n]'
