// The proxy as one more hop: each generated request goes to the same HTTPS upstream through
// two sidecars, one direct (`localhost`) and one through a CONNECT tunnel (`store.ti.test`,
// which only the proxy resolves). The upstream must see the same request both ways but for
// Host (the name each was given) and the token; the caller must get the same answer.
import assert from 'node:assert/strict'
import fc from 'fast-check'
import t from 'tap'
import { build } from '../helpers/build.js'
import { call, endToEnd, headerMap } from '../helpers/caller.js'
import { startRecordingProxy, startTlsFront } from '../helpers/recording-proxy.js'
import { startRecordingTokenEndpoint } from '../helpers/recording-token-endpoint.js'
import { startRecordingUpstream, type Recorded } from '../helpers/recording-upstream.js'
import { answerCaseArb, bodyArb, hopByHopArb, METHODS, requestCaseArb, requestHeadersArb, toAnswer, toCallerRequest } from '../generative/arbitraries.js'
import { checkProperty, fileBudget, nextId } from '../generative/harness.js'
import { STORE_HOST, TI_TLS, trustTestCa } from './setup.js'

trustTestCa()
fileBudget(t)

t.test('through the egress proxy, the upstream sees what it sees without it', async (t) => {
  const tokenEndpoint = await startRecordingTokenEndpoint(t)
  const upstream = await startRecordingUpstream(t)
  const frontPort = await startTlsFront(t, Number(new URL(upstream.url).port), TI_TLS)
  const proxy = await startRecordingProxy(t, { hosts: { [STORE_HOST]: frontPort } })
  const env = { AUTH_URL: tokenEndpoint.url, RATE_LIMIT_COOLDOWN_MS: '0' }
  const direct = await build(t, { ...env, UPSTREAM_URL: `https://localhost:${frontPort}` })
  const proxied = await build(t, { ...env, UPSTREAM_URL: `https://${STORE_HOST}:${frontPort}`, HTTPS_PROXY: proxy.url })

  const same = (a: Recorded, b: Recorded): void => {
    assert.equal(b.method, a.method, 'method')
    assert.equal(b.url, a.url, 'request target byte for byte')
    const omit = ['host', 'authorization', 'x-gen-id']
    assert.deepEqual(endToEnd(b.rawHeaders, omit), endToEnd(a.rawHeaders, omit), 'the same headers, order, case and repeats')
    assert.deepEqual(headerMap(b.rawHeaders).get('host'), [`${STORE_HOST}:${frontPort}`], 'Host: the name it was given')
    assert.equal(b.complete, a.complete, 'the body ended alike')
    assert.ok(b.body().equals(a.body()), 'the same body bytes')
  }

  await checkProperty(t, 'one more hop', fc.asyncProperty(
    requestCaseArb({ methods: METHODS, headers: fc.tuple(requestHeadersArb, hopByHopArb).map(([a, b]) => [...a, ...b]), body: bodyArb }),
    answerCaseArb,
    async (c, a) => {
      const [aId, bId] = [nextId('direct'), nextId('proxied')]
      upstream.plan(aId, { kind: 'answer', answer: toAnswer(a) })
      upstream.plan(bId, { kind: 'answer', answer: toAnswer(a) })
      const viaDirect = await call(direct.proxyUrl, toCallerRequest(c, aId))
      const viaProxy = await call(proxied.proxyUrl, toCallerRequest(c, bId))
      assert.equal(viaProxy.status, viaDirect.status, 'the same status')
      assert.deepEqual(endToEnd(viaProxy.rawHeaders), endToEnd(viaDirect.rawHeaders), 'the same answer headers')
      assert.ok(viaProxy.body.equals(viaDirect.body), 'the same answer body')
      const [sentDirect, sentProxied] = [upstream.seen(aId), upstream.seen(bId)]
      assert.equal(sentProxied.length, sentDirect.length, 'sent as often')
      if (sentDirect[0] !== undefined && sentProxied[0] !== undefined) same(sentDirect[0], sentProxied[0])
    }
  ), { numRuns: 60, timeLimitMs: 20_000 })
  t.ok(proxy.seen.length > 0 && proxy.seen.every((s) => s.kind === 'connect' && s.target === `${STORE_HOST}:${frontPort}`), 'every proxied request went through a tunnel')
})
