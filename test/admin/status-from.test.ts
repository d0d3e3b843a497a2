// STATUS_FROM (every listener bounded): /status shows the configuration and the client id, so by default it
// answers only loopback peers (kubectl port-forward, exec); any other peer gets 403, while
// /livez, /readyz and /metrics stay reachable from the pod network. `any` serves everyone.
import t from 'tap'
import { isLoopbackPeer } from '../../src/admin/routes.js'
import { loadConfig } from '../../src/config/load.js'
import { build, startStandIn } from '../helpers/build.js'

t.test('STATUS_FROM: loopback by default, or any; nothing else', async (t) => {
  const base = { CLIENT_ID: 'a', CLIENT_SECRET: 'b', AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example' }
  t.equal(loadConfig(base).admin.statusFrom, 'loopback')
  t.equal(loadConfig({ ...base, STATUS_FROM: 'any' }).admin.statusFrom, 'any')
  t.throws(() => loadConfig({ ...base, STATUS_FROM: 'pod' }), /STATUS_FROM: must be one of loopback, any/)
})

t.test('which peers are loopback', async (t) => {
  const cases: Array<[string | undefined, boolean]> = [
    ['127.0.0.1', true], ['127.8.9.10', true], ['::1', true], ['::ffff:127.0.0.1', true], ['::FFFF:127.0.0.2', true],
    ['10.0.0.5', false], ['128.0.0.1', false], ['::ffff:10.1.2.3', false], ['fe80::1', false], ['::2', false],
    ['1.127.0.0', false], [undefined, false], ['', false], ['localhost', false]
  ]
  for (const [address, loopback] of cases) t.equal(isLoopbackPeer(address), loopback, String(address))
})

t.test('a peer on the pod network: 403 on /status by default, 200 with STATUS_FROM=any; the probes and /metrics 200 either way', async (t) => {
  const standIn = await startStandIn(t)
  const urls = { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url }
  const loopbackOnly = await build(t, urls)
  const podPeer = { remoteAddress: '10.1.2.3' }
  const denied = await loopbackOnly.app.admin.inject({ url: '/status', ...podPeer })
  t.equal(denied.statusCode, 403)
  t.same(denied.json(), { error: 'FORBIDDEN', message: '/status is served to loopback peers only (STATUS_FROM=loopback)' })
  t.notMatch(denied.body, /CLIENT_ID|clientId/, 'nothing of the status')
  t.equal((await loopbackOnly.app.admin.inject({ url: '/status', remoteAddress: '127.0.0.1' })).statusCode, 200, 'loopback: 200')
  for (const url of ['/livez', '/readyz', '/metrics']) t.equal((await loopbackOnly.app.admin.inject({ url, ...podPeer })).statusCode, 200, `${url} from the pod network`)

  const any = await build(t, { ...urls, STATUS_FROM: 'any' })
  t.equal((await any.app.admin.inject({ url: '/status', ...podPeer })).statusCode, 200, 'any: 200')
  const off = await build(t, { ...urls, STATUS_ENDPOINT: 'false', STATUS_FROM: 'any' })
  t.equal((await off.app.admin.inject({ url: '/status', ...podPeer })).statusCode, 404, 'STATUS_ENDPOINT=false wins: 404')
})
