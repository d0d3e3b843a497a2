// A plain http:// AUTH_URL or UPSTREAM_URL to another host is accepted, but named: the client
// secret or the token would cross the network unencrypted. Loopback in every spelling is fine.
import t from 'tap'
import { plainHttpWarnings } from '../../src/config/warnings.js'

const TLS = 'https://transact.ti.com'

t.test('remote plain http: one warning per URL, naming the variable, the host and what crosses', async (t) => {
  t.same(plainHttpWarnings({ token: { authUrl: 'http://auth.internal:8081' }, upstream: { url: TLS } }), [
    'AUTH_URL is plain http:// to auth.internal:8081, which is not this machine: the client secret would cross the network unencrypted; use https://'
  ])
  t.same(plainHttpWarnings({ token: { authUrl: TLS }, upstream: { url: 'http://10.1.2.3/base' } }), [
    'UPSTREAM_URL is plain http:// to 10.1.2.3, which is not this machine: the access token would cross the network unencrypted; use https://'
  ])
  t.equal(plainHttpWarnings({ token: { authUrl: 'http://[2001:db8::1]' }, upstream: { url: 'http://stand-in:8081' } }).length, 2)
})

t.test('https anywhere, and plain http on this machine, say nothing', async (t) => {
  t.same(plainHttpWarnings({ token: { authUrl: TLS }, upstream: { url: 'https://10.1.2.3' } }), [])
  for (const local of ['http://127.0.0.1:8081', 'http://127.8.9.10', 'http://localhost:1', 'http://LOCALHOST', 'http://ti.localhost', 'http://[::1]:8081']) {
    t.same(plainHttpWarnings({ token: { authUrl: local }, upstream: { url: local } }), [], local)
  }
})
