// The user and password of a URL as they are sent (Redis's, the egress proxy's), and a proxy URL
// with or without its scheme: the cases the settings' mutation run left unstated.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { parseProxyUrl } from '../../src/config/egress-proxy.js'
import { BAD_ESCAPE, userInfo } from '../../src/config/url-credentials.js'
import { parseEnv } from '../../src/config/parse-env.js'
import { parseAllowedRoutes } from '../../src/config/orders.js'

t.test('userInfo: percent-decoded as sent; a bad escape is undefined', async (t) => {
  t.same(userInfo(new URL('redis://us%40er:p%3Ass%25@redis:6379')), { username: 'us@er', password: 'p:ss%' })
  t.same(userInfo(new URL('redis://redis:6379')), { username: '', password: '' })
  t.equal(userInfo(new URL('redis://u:50%zz@redis:6379')), undefined)
})

t.test('a Redis URL with a bad escape in its password: named, the fix said, the value not shown', async (t) => {
  const thrown = t.throws(() => loadConfig({
    CLIENT_ID: 'id', CLIENT_SECRET: 'secret', RATE_LIMITS: 'GET /v2/store/** 1/1s', RATE_LIMIT_REDIS_URL: 'redis://u:hunter%zz@redis:6379'
  })) as Error
  t.match(thrown.message, `RATE_LIMIT_REDIS_URL: ${BAD_ESCAPE}`)
  t.ok(BAD_ESCAPE.includes('%25'), 'the message says how to write a literal %')
  t.notOk(thrown.message.includes('hunter'), 'the password is not in it')
})

t.test('parseProxyUrl: a scheme only at the start counts; without one, http:// is meant', async (t) => {
  t.equal(parseProxyUrl('proxy.internal:3128')?.href, 'http://proxy.internal:3128/')
  t.equal(parseProxyUrl('proxy.internal:3128/?next=http://other')?.host, 'proxy.internal:3128', 'a URL later in the value is not its scheme')
  t.equal(parseProxyUrl('https://proxy.internal:3129')?.protocol, 'https:')
  t.equal(parseProxyUrl('socks5://proxy.internal:1080'), undefined, 'only http: and https: proxies')
})

t.test('parseEnv: union types and two schemas with one $id compile, as env-schema allowed', async (t) => {
  t.same(parseEnv({ type: 'object', properties: { X: { type: ['integer', 'boolean'] } } }, { X: '3' }), { X: 3 })
  const a = { $id: 'sidecar-env', type: 'object', properties: { A: { type: 'string' } } }
  const b = { $id: 'sidecar-env', type: 'object', properties: { B: { type: 'string' } } }
  t.same(parseEnv(a, { A: 'x' }), { A: 'x' })
  t.same(parseEnv(b, { B: 'y' }), { B: 'y' }, 'a second schema with the same $id is its own')
})

t.test('ALLOWED_ROUTES entries: any whitespace between the words; a method is upper-case from its first letter to its last', async (t) => {
  const problems: string[] = []
  t.same(parseAllowedRoutes('  GET \t /v2/store/**  ;\tPOST   /v2/store/carts ', problems).map((r) => r.id), ['GET /v2/store/**', 'POST /v2/store/carts'])
  t.same(problems, [])
  for (const method of ['xGET', 'GET!', 'get']) {
    const p: string[] = []
    t.same(parseAllowedRoutes(`${method} /a`, p), [], `${method}: no route`)
    t.same(p, [`ALLOWED_ROUTES: route 1 "${method} /a": method "${method}" must be an upper-case HTTP method or *`])
  }
  const p: string[] = []
  t.same(parseAllowedRoutes('GET', p), [])
  t.same(p, ['ALLOWED_ROUTES: route 1 "GET": must be METHOD PATH (e.g. GET /v2/store/**)'])
  t.ok(Object.isFrozen(parseAllowedRoutes('* /a', [])), 'the routes are frozen')
})
