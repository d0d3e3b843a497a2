// The chart's rateLimits.cache.redisMaxBytes (where the features meet, case 2): rendered as
// CACHE_REDIS_MAX_BYTES only when set (0 included: no copies in Redis), refused by the schema
// outside the sidecar's bounds. On a real render validated against Kubernetes' schemas.
import t from 'tap'
import { CHART, envOf, one, refusal, render, sidecarOf } from './chart-helm.js'
import { CI } from './chart-expect.js'

t.setTimeout(240_000)

const example = ['demo', CHART, ...CI('example-values.yaml'), '--kube-version', '1.31']
const redisEnv = async (args: string[]): Promise<string | undefined> =>
  envOf(sidecarOf(one(await render([...example, ...args]), 'Deployment', 'demo-store-auth-proxy')).container).CACHE_REDIS_MAX_BYTES

t.test('the fleet\'s bound in Redis: rendered when set, as an integer; left to the sidecar when null', async (t) => {
  t.equal(await redisEnv([]), undefined, 'null: the sidecar\'s default')
  t.equal(await redisEnv(['--set', 'rateLimits.cache.redisMaxBytes=268435456']), '268435456', 'as an integer (Helm reads 2.68435456e+08)')
  t.equal(await redisEnv(['--set', 'rateLimits.cache.redisMaxBytes=0']), '0', '0: none kept in Redis')
})

t.test('the schema refuses a bound outside the sidecar\'s', async (t) => {
  for (const value of ['-1', '17179869185']) {
    t.match(refusal([...example, '--set', `rateLimits.cache.redisMaxBytes=${value}`]), /rateLimits\.cache\.redisMaxBytes/, value)
  }
})
