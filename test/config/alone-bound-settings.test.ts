// RATE_LIMIT_ALONE_MAX_MS as an operator writes it: its own default is writable (the catalog's
// rules: a day + an hour), 0 turns the bound off, up to 30 days with the reason past it, and a
// declared fleet of one has no bound whatever is set (its ledger is the whole tally).
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { MAX_ALONE_MS } from '../../src/config/schema.js'
import { problemsOf as problems } from './problems.js'

const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }
const CATALOG = 'GET /v2/store/products/catalog 1/4h 6/1d'
const HOUR = 3_600_000
const DAY = 24 * HOUR
const aloneMaxMs = (env: Record<string, string>): number => loadConfig({ ...base, RATE_LIMITS: CATALOG, ...env }).rateLimits.aloneMaxMs
const problemsOf = (env: Record<string, string>): string[] => problems(() => loadConfig({ ...base, RATE_LIMITS: CATALOG, ...env }))

t.test('the default for the catalog\'s rules can be written as it is', async (t) => {
  const dflt = aloneMaxMs({})
  t.equal(dflt, DAY + HOUR)
  t.same(problemsOf({ RATE_LIMIT_ALONE_MAX_MS: String(dflt) }), [])
  t.equal(aloneMaxMs({ RATE_LIMIT_ALONE_MAX_MS: String(dflt) }), dflt)
})

t.test('0 turns the bound off', async (t) => {
  t.same(problemsOf({ RATE_LIMIT_ALONE_MAX_MS: '0' }), [])
  t.equal(aloneMaxMs({ RATE_LIMIT_ALONE_MAX_MS: '0', RATE_LIMIT_FLEET_SIZE: '3' }), 0)
})

t.test('at most 30 days, and past it the reason', async (t) => {
  t.equal(MAX_ALONE_MS, 30 * DAY)
  t.equal(aloneMaxMs({ RATE_LIMIT_ALONE_MAX_MS: String(30 * DAY) }), 30 * DAY)
  const over = problemsOf({ RATE_LIMIT_ALONE_MAX_MS: String(30 * DAY + 1) })
  t.same(over, [`RATE_LIMIT_ALONE_MAX_MS: must be at most ${30 * DAY} (30 days: it is no timer, but longer holds a dead sidecar's share as good as for ever; 0 turns the bound off)`])
  t.same(problemsOf({ RATE_LIMIT_ALONE_MAX_MS: '-1' }), ['RATE_LIMIT_ALONE_MAX_MS: must be at least 0'])
})

t.test('decimal digits only: what Ajv alone would read as a number is a problem', async (t) => {
  const notDigits = 'RATE_LIMIT_ALONE_MAX_MS: must be a whole number of milliseconds, in digits (30000 is 30 s)'
  // ' ' read as 0 would turn the bound off; '0x10' as 16, a bound of 16 ms.
  for (const value of ['', ' ', '\t', '0x10', '1e3', '1.5', '+5', '5000ms', '5 000']) {
    t.same(problemsOf({ RATE_LIMIT_ALONE_MAX_MS: value }), [notDigits], JSON.stringify(value))
  }
  t.equal(aloneMaxMs({ RATE_LIMIT_ALONE_MAX_MS: ' 5000 ' }), 5_000, 'blanks around the digits, as every whole-number setting')
  t.equal(aloneMaxMs({ RATE_LIMIT_ALONE_MAX_MS: '05000' }), 5_000, 'a leading zero is still decimal')
})

for (const [name, env, expected] of [
  ['a declared fleet of one: no bound', { RATE_LIMIT_FLEET_SIZE: '1' }, 0],
  ['a declared fleet of one, a bound set: none all the same', { RATE_LIMIT_FLEET_SIZE: '1', RATE_LIMIT_ALONE_MAX_MS: '60000' }, 0],
  ['a fleet of two: the bound set', { RATE_LIMIT_FLEET_SIZE: '2', RATE_LIMIT_ALONE_MAX_MS: '60000' }, 60_000],
  ['a fleet of two: the default', { RATE_LIMIT_FLEET_SIZE: '2' }, DAY + HOUR],
  ['no fleet size (nothing spent alone): the default', {}, DAY + HOUR]
] as Array<[string, Record<string, string>, number]>) {
  t.test(name, async (t) => {
    t.equal(aloneMaxMs(env), expected)
  })
}
