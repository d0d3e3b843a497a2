// The span a sidecar tells Redis: its hold ends that long after its presence. The sidecar
// spends alone up to RATE_LIMIT_ALONE_MAX_MS by its own clock; its last send counts at TI for
// the longest window after. Redis's clock may run faster than the sidecar's (NTP: 0.1 % between
// two disciplined clocks): over a bound of days, that outgrows the presence TTL (3 s), the
// only other slack, and Redis would end the hold while that send still counts.
import t from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'
import { aloneSpanMs } from '../../src/quota/fleet-alone.js'

const DAY = 24 * 3_600_000
const TTL_MS = 3_000
/** How much faster Redis's clock may tick than the sidecar's (docs/quota-guard.md, the second assumption). */
const RATE = 0.001

for (const [name, rules, boundMs] of [
  ['the catalog, the default bound (a day + an hour)', 'GET /v2/store/products/catalog 1/4h 6/1d', DAY + 3_600_000],
  ['the largest bound (30 days)', 'GET /a 1/1d', 30 * DAY],
  ['a short bound', '* /v2/store/** 5/1s', 60_000]
] as Array<[string, string, number]>) {
  t.test(name, async (t) => {
    const parsed = parseRules(rules, 'RATE_LIMITS').rules
    const windowMs = Math.max(...parsed.flatMap((r) => r.limits.map((l) => l.windowMs)))
    const span = aloneSpanMs(boundMs, parsed)
    // On Redis's clock, 0.1 % fast: the last send alone leaves by bound × 1.001 after the last
    // script Redis ran, and counts a window after (TI's clock, taken as fast as Redis's).
    const lastCounts = boundMs * (1 + RATE) + windowMs
    t.ok(TTL_MS + span >= lastCounts, `the hold (TTL + span ${span} ms) outlasts the last send alone (${lastCounts} ms)`)
    t.ok(span <= Math.ceil((boundMs + windowMs) * (1 + RATE)), 'by no more than the margin')
  })
}

t.test('no bound: no span (the entry ends only by the count)', async (t) => {
  t.equal(aloneSpanMs(undefined, parseRules('GET /a 1/1s', 'RATE_LIMITS').rules), 0)
})
