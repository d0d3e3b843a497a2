import { once } from 'node:events'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { networkInterfaces } from 'node:os'
import t from 'tap'
import { build, startStandIn } from '../helpers/build.js'
import { send, startTiBehindProxy, STORE_HOST, TOKEN_HOST, trustTestCa } from './setup.js'

// NO_PROXY sends a target direct. TI's test names resolve only in the proxy, so a target
// sent direct fails to resolve: that is how these tests see a bypass by name. An address
// of this machine (not loopback, which is always direct) shows a bypass by IP succeed.
trustTestCa()

async function json (url: string): Promise<Record<string, unknown>> {
  return await (await fetch(url)).json() as Record<string, unknown>
}

t.test('NO_PROXY by host: that host goes direct, the others through the proxy', async (t) => {
  const ti = await startTiBehindProxy(t)
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, HTTPS_PROXY: ti.proxy.url, NO_PROXY: STORE_HOST })
  t.equal(ti.standIn.tokensIssued(), 1, 'the token came through the proxy')
  const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders' })
  t.equal(answer.status, 502, 'the store host, sent direct, resolves nowhere')
  t.same(ti.proxy.seen.map((s) => s.target), [`${TOKEN_HOST}:443`])
  t.match(await json(`${adminUrl}/status`), { config: { NO_PROXY: STORE_HOST, tokenRoute: `via ${ti.proxy.url}`, upstreamRoute: 'direct (NO_PROXY)' } })
})

t.test('NO_PROXY by suffix: every host under it goes direct', async (t) => {
  const ti = await startTiBehindProxy(t)
  const { adminUrl } = await build(t, { AUTH_URL: ti.authUrl, UPSTREAM_URL: ti.upstreamUrl, https_proxy: ti.proxy.url, no_proxy: '.ti.test' })
  t.equal(ti.proxy.seen.length, 0)
  t.equal(ti.standIn.tokensIssued(), 0)
  t.match(await json(`${adminUrl}/status`), { tokenRequests: { lastFailure: { reason: 'token endpoint unreachable (ENOTFOUND)' } } })
})

const address = Object.values(networkInterfaces()).flat().find((i) => i !== undefined && !i.internal && i.family === 'IPv4')?.address
t.test('NO_PROXY by IP address: an upstream at an address of this machine, direct', { skip: address === undefined ? 'no non-loopback IPv4 address here' : false }, async (t) => {
  const ip = address ?? ''
  const server = createServer((_req, res) => { res.end('direct') })
  server.listen(0, ip)
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  const upstreamUrl = `http://${ip}:${(server.address() as AddressInfo).port}`
  const local = await startStandIn(t)
  const ti = await startTiBehindProxy(t, {}, { plain: true })
  for (const noProxy of [ip, `${ip.split('.').slice(0, 3).join('.')}.0/24`]) {
    const { proxyUrl } = await build(t, { AUTH_URL: local.url, UPSTREAM_URL: upstreamUrl, HTTP_PROXY: ti.proxy.url, NO_PROXY: `example.com,${noProxy}` })
    const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders' })
    t.equal(answer.body.toString(), 'direct', `NO_PROXY=${noProxy}`)
  }
  t.equal(ti.proxy.seen.length, 0)
  // And without NO_PROXY, the same upstream goes through the proxy (which does not know it: 502).
  const { proxyUrl } = await build(t, { AUTH_URL: local.url, UPSTREAM_URL: upstreamUrl, HTTP_PROXY: ti.proxy.url })
  const proxied = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders' })
  t.equal(proxied.status, 502)
  t.same(ti.proxy.seen.map((s) => s.target), [`${upstreamUrl}/v2/store/orders`])
})

t.test('loopback is never proxied: the demo and a local stand-in work with a proxy set', async (t) => {
  const local = await startStandIn(t)
  const ti = await startTiBehindProxy(t, {}, { plain: true })
  const { proxyUrl, adminUrl } = await build(t, { AUTH_URL: local.url, UPSTREAM_URL: local.url, HTTP_PROXY: ti.proxy.url, HTTPS_PROXY: ti.proxy.url })
  t.equal(local.tokensIssued(), 1)
  const answer = await send(proxyUrl, { method: 'GET', path: '/v2/store/catalog' })
  t.not(answer.status, 502)
  t.equal(ti.proxy.seen.length, 0)
  t.match(await json(`${adminUrl}/status`), { config: { tokenRoute: 'direct (loopback)', upstreamRoute: 'direct (loopback)' } })
})
