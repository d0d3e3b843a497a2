// rateLimits.headers: the RateLimit fields are the sidecar's default; false renders
// RATE_LIMIT_HEADERS=false, which the sidecar's own schema accepts.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { CHART, envOf, one, refusal, render, sidecarOf } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(120_000)

const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
const headersEnv = async (args: string[]): Promise<string | undefined> =>
  envOf(sidecarOf(one(await render([...example, ...args]), 'Deployment', 'demo-store-auth-proxy')).container).RATE_LIMIT_HEADERS

t.test('rateLimits.headers: left true, no variable; false, RATE_LIMIT_HEADERS=false', async (t) => {
  t.equal(await headersEnv([]), undefined, 'the default: the fields on')
  const off = await headersEnv(['--set', 'rateLimits.headers=false'])
  t.equal(off, 'false')
  const config = loadConfig({ AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example', CLIENT_ID: 'i', CLIENT_SECRET: 's', RATE_LIMIT_HEADERS: off ?? '' })
  t.equal(config.rateLimits.headers, false, 'read as off by the sidecar')
  t.match(refusal([...example, '--set', 'rateLimits.headers=maybe']), /headers/, 'not a boolean: refused by the schema')
})
