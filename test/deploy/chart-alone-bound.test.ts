// rateLimits.redis.aloneMaxMs as the sidecar takes RATE_LIMIT_ALONE_MAX_MS: the default for the
// catalog's rules (a day + an hour) can be written, 0 (no bound) renders as 0, up to 30 days;
// the schema refuses what the sidecar would (below 0, past 30 days). Real renders, validated.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { MAX_ALONE_MS } from '../../src/config/schema.js'
import { CHART, envOf, refusal, render, one, sidecarOf } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(240_000)

const CATALOG = 'GET /v2/store/products/catalog 1/4h 6/1d'
const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31',
  '--set-json', `rateLimits.rules=${JSON.stringify([CATALOG])}`, '--set', 'rateLimits.redis.existingSecret=store-redis']
const catalogDefault = loadConfig({ AUTH_URL: 'https://a.example.test', UPSTREAM_URL: 'https://u.example.test', CLIENT_ID: 'i', CLIENT_SECRET: 's', RATE_LIMITS: CATALOG }).rateLimits.aloneMaxMs

const rendered = async (value: number): Promise<string | undefined> =>
  envOf(sidecarOf(one(await render([...example, '--set', `rateLimits.redis.aloneMaxMs=${value}`]), 'Deployment', 'demo-store-auth-proxy')).container).RATE_LIMIT_ALONE_MAX_MS

t.test('what the sidecar accepts renders as given', async (t) => {
  t.equal(catalogDefault, 90_000_000)
  for (const value of [0, catalogDefault, MAX_ALONE_MS]) t.equal(await rendered(value), String(value), `${value}`)
})

t.test('what the sidecar refuses the schema refuses', async (t) => {
  for (const value of [-1, MAX_ALONE_MS + 1]) t.match(refusal([...example, '--set', `rateLimits.redis.aloneMaxMs=${value}`]), /rateLimits\.redis\.aloneMaxMs/, `${value}`)
})
