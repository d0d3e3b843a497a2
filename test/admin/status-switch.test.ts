// STATUS_ENDPOINT: /status needs no authentication and names URLs, file paths and rules, so
// a deployment that cannot restrict the admin port can turn it off; the probes and /metrics stay.
import t from 'tap'
import { request } from 'undici'
import { loadConfig } from '../../src/config/load.js'
import { build, CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'

t.test('STATUS_ENDPOINT defaults to true and reads booleans', async (t) => {
  const base = { CLIENT_ID, CLIENT_SECRET, AUTH_URL: 'https://auth.example', UPSTREAM_URL: 'https://api.example' }
  t.equal(loadConfig(base).admin.statusEndpoint, true)
  t.equal(loadConfig({ ...base, STATUS_ENDPOINT: 'false' }).admin.statusEndpoint, false)
  t.throws(() => loadConfig({ ...base, STATUS_ENDPOINT: 'maybe' }), /STATUS_ENDPOINT/)
})

t.test('/status answers 200 by default and 404 when switched off; the rest of the admin port stays', async (t) => {
  const standIn = await startStandIn(t)
  const urls = { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url }
  const on = await build(t, urls)
  t.equal((await request(on.adminUrl + '/status')).statusCode, 200, 'on by default')

  const off = await build(t, { ...urls, STATUS_ENDPOINT: 'false' })
  t.equal((await request(off.adminUrl + '/status')).statusCode, 404, 'off: 404')
  for (const path of ['/livez', '/readyz', '/metrics']) {
    t.equal((await request(off.adminUrl + path)).statusCode, 200, `${path} still served`)
  }
})
