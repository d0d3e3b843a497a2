// Rules that meant something other than they said, and a cool-down lost when Redis came
// back, first found by a reviewer who did not write the guard. Each failed before its fix.
import t from 'tap'
import { startRedis } from '../helpers/redis.js'
import { answer, backendOf, eventually, quotaSidecar } from './sidecar.js'
import { parseRules } from '../../src/config/rate-limit-rules.js'

t.test('a limit written twice in a rule (once charged twice per send: 2/1m 2/1m allowed 1) is refused', async (t) => {
  const { rules, problems } = parseRules('GET /v2/store/x 2/1m 2/1m', 'RATE_LIMITS')
  t.same(rules, [])
  t.same(problems, ['RATE_LIMITS: rule 1 "GET /v2/store/x 2/1m 2/1m": repeats the limit 2/1m'])
})

t.test('a percent-encoded unreserved character in a rule\'s PATH matches (it once matched nothing)', async (t) => {
  // Requests are matched after decoding %7E to ~ (README), the pattern is not: a~b never equals a%7Eb.
  const s = await quotaSidecar(t, { RATE_LIMITS: 'GET /v2/store/a%7Eb 1/1d', RATE_LIMIT_MAX_WAIT_MS: '0' })
  t.equal((await s.call('/v2/store/a%7Eb', 'a')).status, 200)
  await s.call('/v2/store/a%7Eb', 'b')
  t.same(s.upstream.seen('b'), [], 'the second call of a 1/1d rule must not reach TI')
})

t.test('a rule shadowed by an earlier, broader rule is refused at start', async (t) => {
  // The parser rejects an exact repeat because "this one would never apply"; a shadowed one never applies either.
  const { problems } = parseRules('* /v2/store/** 5/1s; GET /v2/store/products/catalog 1/4h 6/1d', 'RATE_LIMITS')
  t.equal(problems.length, 1, 'the catalog rule can never apply: reported')
})

t.test('a cool-down begun while Redis was down holds when Redis comes back', async (t) => {
  const redis = await startRedis(t)
  // A declared fleet of one keeps its whole budget while Redis is away (one window after start).
  const s = await quotaSidecar(t, { RATE_LIMITS: '* /v2/store/** 1000/1s', RATE_LIMIT_FLEET_SIZE: '1' }, { redisUrl: redis.url, systemClock: true })
  t.equal((await s.call('/v2/store/a', 'before')).status, 200)
  await redis.stop()
  let down = 0
  await eventually(t, 'a call sent with Redis down', async () => (await s.call('/v2/store/a', `down${down++}`)).status === 200)
  await eventually(t, 'on memory', async () => (await backendOf(s)) === 'memory')
  s.upstream.plan('limited', { kind: 'answer', answer: answer(429, [['Retry-After', '120']], '') })
  t.equal((await s.call('/v2/store/a', 'limited')).status, 429)
  t.equal((await s.call('/v2/store/a', 'cooled')).status, 429, 'cooling down in memory')
  await redis.start()
  await eventually(t, 'back on Redis', async () => (await backendOf(s)) === 'redis')
  await s.call('/v2/store/a', 'after')
  t.same(s.upstream.seen('after'), [], 'TI was told to wait 120 s: it must see nothing for them')
})
