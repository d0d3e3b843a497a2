import t from 'tap'
import { bypassesEgressProxy, isLoopback, loadEgressProxy, parseProxyUrl, proxyDisplayUrl, routeDisplay, routeFor } from '../../src/egress/route.js'

// The variables, read the standard way, and which way each target goes: pure, no sockets.

t.test('the variables: lower case first, empty is unset, shown as scheme://host:port only', async (t) => {
  const cases: Array<[string, Record<string, string>, { https: string | undefined, http: string | undefined, from?: string, noProxy?: string }]> = [
    ['none', {}, { https: undefined, http: undefined }],
    ['upper case', { HTTPS_PROXY: 'http://proxy.corp:3128' }, { https: 'http://proxy.corp:3128', http: undefined, from: 'HTTPS_PROXY' }],
    ['lower case wins over upper', { https_proxy: 'http://lower:1', HTTPS_PROXY: 'http://upper:2' }, { https: 'http://lower:1', http: undefined, from: 'https_proxy' }],
    ['an empty lower case falls back to upper', { https_proxy: '', HTTPS_PROXY: 'http://upper:2' }, { https: 'http://upper:2', http: undefined, from: 'HTTPS_PROXY' }],
    ['HTTP_PROXY is for http:// only', { HTTP_PROXY: 'proxy.corp:8080' }, { https: undefined, http: 'http://proxy.corp:8080' }],
    ['no scheme means http, default port shown', { HTTPS_PROXY: 'proxy.corp' }, { https: 'http://proxy.corp:80', http: undefined }],
    ['an https proxy, its default port', { HTTPS_PROXY: 'https://u:p@proxy.corp' }, { https: 'https://proxy.corp:443', http: undefined }],
    ['credentials never shown', { HTTPS_PROXY: 'http://user:s3cr%40t@proxy.corp:3128/' }, { https: 'http://proxy.corp:3128', http: undefined }],
    ['NO_PROXY, lower case first', { no_proxy: '.corp', NO_PROXY: '*' }, { https: undefined, http: undefined, noProxy: '.corp' }]
  ]
  for (const [name, env, want] of cases) {
    const problems: string[] = []
    const egress = loadEgressProxy(env, problems)
    t.same(problems, [], name)
    t.equal(egress.httpsProxy?.display, want.https, `${name}: HTTPS_PROXY`)
    t.equal(egress.httpProxy?.display, want.http, `${name}: HTTP_PROXY`)
    if (want.from !== undefined) t.equal(egress.httpsProxy?.from, want.from, `${name}: read from`)
    t.equal(egress.noProxy, want.noProxy ?? '', `${name}: NO_PROXY`)
  }
})

t.test('a bad proxy URL is named, never shown (it may hold a password)', async (t) => {
  for (const value of ['socks5://u:hunter2@proxy:1080', 'http://u:hunter2@', 'ftp://hunter2', 'http://[hunter2']) {
    const problems: string[] = []
    loadEgressProxy({ https_proxy: value }, problems)
    t.equal(problems.length, 1, value)
    t.match(problems[0], /^https_proxy: /)
    t.notMatch(problems[0], /hunter2/)
  }
})

t.test('parseProxyUrl and proxyDisplayUrl', async (t) => {
  t.equal(parseProxyUrl('ftp://x'), undefined)
  t.equal(proxyDisplayUrl(parseProxyUrl('HTTP://Proxy.Corp:3128') as URL), 'http://proxy.corp:3128')
  t.equal(proxyDisplayUrl(parseProxyUrl('http://[fd00::1]:3128') as URL), 'http://[fd00::1]:3128')
})

t.test('NO_PROXY: hosts, suffixes, *, ports, IP addresses and ranges', async (t) => {
  const cases: Array<[string, string, boolean]> = [
    ['https://transact.ti.com', '', false],
    ['https://transact.ti.com', '*', true],
    ['https://transact.ti.com', 'transact.ti.com', true],
    ['https://TRANSACT.ti.com.', 'transact.ti.com', true],
    ['https://transact.ti.com', 'ti.com', true],
    ['https://transact.ti.com', '.ti.com', true],
    ['https://transact.ti.com', '*.ti.com', true],
    ['https://ti.com', '.ti.com', true],
    ['https://notti.com', 'ti.com', false],
    ['https://transact.ti.com', 'other.com, ti.com', true],
    ['https://transact.ti.com', 'other.com ti.com', true],
    ['https://transact.ti.com', 'ti.com:443', true],
    ['https://transact.ti.com', 'ti.com:8443', false],
    ['https://transact.ti.com:8443', 'ti.com:8443', true],
    ['http://transact.ti.com', 'ti.com:443', false],
    ['https://10.1.2.3', '10.1.2.3', true],
    ['https://10.1.2.3', '10.1.2.4', false],
    ['https://10.1.2.3', '10.0.0.0/8', true],
    ['https://11.1.2.3', '10.0.0.0/8', false],
    ['https://10.1.2.3:8443', '10.1.2.3:8443', true],
    ['https://[fd00::5]', 'fd00::5', true],
    ['https://[fd00::5]', '[fd00::5]', true],
    ['https://[fd00::5]:8443', '[fd00::5]:8443', true],
    ['https://[fd00::5]', 'fd00::/16', true],
    ['https://[fe00::5]', 'fd00::/16', false],
    ['https://transact.ti.com', '10.0.0.0/8', false],
    ['https://10.1.2.3', 'ti.com', false]
  ]
  for (const [target, noProxy, direct] of cases) {
    t.equal(bypassesEgressProxy(new URL(target), noProxy), direct, `${target} with NO_PROXY=${JSON.stringify(noProxy)}`)
  }
})

t.test('loopback is always direct, whatever NO_PROXY says', async (t) => {
  for (const host of ['localhost', 'LOCALHOST', 'demo.localhost', '127.0.0.1', '127.9.9.9', '[::1]']) t.ok(isLoopback(host), host)
  for (const host of ['10.0.0.1', 'localhost.ti.com', '[fd00::1]', 'transact.ti.com']) t.notOk(isLoopback(host), host)
  const egress = loadEgressProxy({ HTTPS_PROXY: 'http://proxy.corp:3128', HTTP_PROXY: 'http://proxy.corp:3128' }, [])
  t.same(routeFor('http://127.0.0.1:8081', egress), { via: 'direct', why: 'loopback' })
  t.same(routeFor('https://localhost:8443', egress), { via: 'direct', why: 'loopback' })
})

t.test('routeFor: which proxy, or direct and why; shown without credentials', async (t) => {
  const egress = loadEgressProxy({ HTTPS_PROXY: 'http://u:pw@proxy.corp:3128', NO_PROXY: '.internal' }, [])
  const viaProxy = routeFor('https://transact.ti.com', egress)
  t.equal(viaProxy.via, 'proxy')
  t.equal(routeDisplay(viaProxy), 'via http://proxy.corp:3128')
  t.equal(routeDisplay(routeFor('https://api.internal', egress)), 'direct (NO_PROXY)')
  t.equal(routeDisplay(routeFor('http://transact.ti.com', egress)), 'direct (no proxy set)', 'HTTPS_PROXY is not used for http://')
})
