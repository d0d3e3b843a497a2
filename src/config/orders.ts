// The settings of what a credential may do with money (docs/idempotency.md): STATE_DIR (where
// keys outlive a restart), ALLOWED_ROUTES (the route policy) and TEST_ORDERS (orders go to TI's
// test endpoint). Parsed from the environment that src/config/ has typed; pure, no I/O.
import { isAbsolute } from 'node:path'
import { parsePattern, type Rule } from './rate-limit-rules.js'
import type { RawEnv } from './schema.js'

const METHOD = /^(?:\*|[A-Z][A-Z0-9_-]*)$/

export interface RoutePolicy {
  /** ALLOWED_ROUTES: every other method and path is refused 403; undefined: everything is allowed. */
  readonly allowed: readonly Rule[] | undefined
  /** TEST_ORDERS: `POST /v2/store/orders` goes to TI's `/v2/store/orders/test`. */
  readonly testOrders: boolean
}

export interface OrdersConfig {
  /** STATE_DIR: a directory for durable state; undefined: none (keys live in memory, or Redis). */
  readonly stateDir: string | undefined
  readonly policy: RoutePolicy
}

/** Parses `METHOD PATH` entries (`;` or newlines between them, `#` comments): the budgets' matcher, no limits. */
export function parseAllowedRoutes (text: string, problems: string[]): readonly Rule[] {
  const routes: Rule[] = []
  // Stryker disable next-line Regex: `.` never crosses the line it is on, so the $ anchor changes nothing
  const entries = text.split('\n').flatMap((line) => line.replace(/#.*$/, '').split(';'))
  let n = 0
  for (const entry of entries) {
    const words = entry.match(/\S+/g) ?? []
    if (words.length === 0) continue
    n += 1
    const where = `ALLOWED_ROUTES: route ${n} "${words.join(' ')}"`
    if (words.length !== 2) {
      problems.push(`${where}: must be METHOD PATH (e.g. GET /v2/store/**)`)
      continue
    }
    const [method, path] = words as [string, string]
    if (!METHOD.test(method)) problems.push(`${where}: method "${method}" must be an upper-case HTTP method or *`)
    const segments = parsePattern(path)
    if (typeof segments === 'string') problems.push(`${where}: ${segments}`)
    else if (METHOD.test(method)) routes.push(Object.freeze({ id: `${method} ${path}`, method, segments: Object.freeze(segments), limits: Object.freeze([]) }))
  }
  if (n === 0) problems.push('ALLOWED_ROUTES: names no route: leave it unset to allow every route')
  return Object.freeze(routes)
}

export function checkOrders (raw: RawEnv, problems: string[]): OrdersConfig {
  const dir = raw.STATE_DIR ?? ''
  if (dir !== '' && !isAbsolute(dir)) problems.push('STATE_DIR: must be an absolute path (a directory for durable state), or empty for none')
  const text = raw.ALLOWED_ROUTES
  const allowed = text === undefined ? undefined : parseAllowedRoutes(text, problems)
  return Object.freeze({
    stateDir: dir === '' ? undefined : dir,
    policy: Object.freeze({ allowed, testOrders: raw.TEST_ORDERS === true })
  })
}

/** What the start-up log says of the policy. */
export function describePolicy (policy: RoutePolicy): { allowedRoutes: string[] | 'all', testOrders: boolean } {
  return { allowedRoutes: policy.allowed?.map((route) => route.id) ?? 'all', testOrders: policy.testOrders }
}
