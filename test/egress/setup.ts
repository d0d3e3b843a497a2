import { readFileSync } from 'node:fs'
import { getCACertificates, setDefaultCACertificates } from 'node:tls'
import type { Test } from 'tap'
import { call, type CallerResult } from '../helpers/caller.js'
import { startStandIn } from '../helpers/build.js'
import { startRecordingProxy, startTlsFront, type RecordingProxyOptions } from '../helpers/recording-proxy.js'
import { ID_HEADER, startRecordingUpstream, type Answer } from '../helpers/recording-upstream.js'

// TI's hosts in these tests: names that resolve nowhere but in the proxy, so a request
// that skips the proxy fails (ENOTFOUND). The certificate names them (fixtures/README.md).
export const TOKEN_HOST = 'transact.ti.test'
export const STORE_HOST = 'store.ti.test'

const fixture = (name: string): string => readFileSync(new URL(`./fixtures/${name}`, import.meta.url), 'utf8')
export const TI_CERT_FILE = new URL('./fixtures/ti-test-cert.pem', import.meta.url).pathname
export const TI_TLS = { key: fixture('ti-test-key.pem'), cert: fixture('ti-test-cert.pem') }

/**
 * Trusts the test CA in this process, as NODE_EXTRA_CA_CERTS would at start (tap runs each
 * file in its own process); TLS stays verified. The sub-process tests use NODE_EXTRA_CA_CERTS itself.
 */
export function trustTestCa (): void {
  setDefaultCACertificates([...getCACertificates('default'), TI_TLS.cert])
}

/**
 * The stand-in token endpoint (HTTPS, TOKEN_HOST) and a recording upstream (HTTPS through a
 * TLS front, STORE_HOST), both reachable only through a recording proxy that resolves them;
 * `plain`: both over plain HTTP (through the proxy in absolute form).
 */
export async function startTiBehindProxy (t: Test, proxy: Omit<RecordingProxyOptions, 'hosts'> = {}, { plain = false } = {}) {
  const standIn = await startStandIn(t, plain ? {} : { tls: TI_TLS })
  const upstream = await startRecordingUpstream(t)
  const upstreamPort = Number(new URL(upstream.url).port)
  const storePort = plain ? upstreamPort : await startTlsFront(t, upstreamPort, TI_TLS)
  const recordingProxy = await startRecordingProxy(t, {
    ...proxy,
    hosts: { [TOKEN_HOST]: Number(new URL(standIn.url).port), [STORE_HOST]: storePort }
  })
  const scheme = plain ? 'http' : 'https'
  return { standIn, upstream, proxy: recordingProxy, authUrl: `${scheme}://${TOKEN_HOST}`, upstreamUrl: `${scheme}://${STORE_HOST}` }
}

/** One request to the sidecar, over its own connection (helpers/caller.ts), framed by length. */
export async function send (proxyUrl: string, { method, path, headers = [], body }: {
  method: string, path: string, headers?: Array<[string, string | string[]]>, body?: Buffer
}): Promise<CallerResult> {
  return await call(proxyUrl, {
    method, target: path, headers, body: body ?? Buffer.alloc(0), framing: body === undefined ? 'none' : 'length', cuts: [], expectContinue: false, abort: null
  })
}

type Ti = Awaited<ReturnType<typeof startTiBehindProxy>>

export const ok = (body: string): Answer => ({ status: 200, headers: [['Content-Type', 'text/plain']], body: Buffer.from(body), framing: 'length' })

/**
 * The store calls every route must carry: a GET, a POST with its body whole, an early
 * answer (413 before the body is read), a 401 replayed once with a new token.
 */
export async function storeCalls (t: Test, ti: Ti, proxyUrl: string, { early = true } = {}): Promise<void> {
  const tokensBefore = ti.standIn.tokensIssued()
  ti.upstream.plan('get', { kind: 'answer', answer: ok('got') })
  const get = await send(proxyUrl, { method: 'GET', path: '/v2/store/orders?x=1', headers: [[ID_HEADER, 'get']] })
  t.equal(get.body.toString(), 'got', 'GET')
  t.equal(ti.upstream.seen('get')[0]?.url, '/v2/store/orders?x=1', 'the upstream sees the origin form')

  ti.upstream.plan('post', { kind: 'answer', answer: ok('posted') })
  const body = Buffer.from('{"order":42}')
  const post = await send(proxyUrl, { method: 'POST', path: '/v2/store/orders', headers: [[ID_HEADER, 'post'], ['content-type', 'application/json']], body })
  t.equal(post.body.toString(), 'posted', 'POST')
  t.same(ti.upstream.seen('post')[0]?.body(), body, 'the body arrived whole')

  if (early) {
    ti.upstream.plan('early', { kind: 'early', answer: { ...ok('too large'), status: 413 }, then: 'close' })
    const answer = await send(proxyUrl, { method: 'POST', path: '/v2/store/uploads', headers: [[ID_HEADER, 'early']], body: Buffer.alloc(4 * 1024 * 1024, 1) })
    t.equal(answer.status, 413, 'an early answer')
    t.equal(answer.body.toString(), 'too large')
  }

  ti.upstream.plan('replay', { kind: 'unauthorized', answer: ok('after replay') })
  const replayed = await send(proxyUrl, { method: 'POST', path: '/v2/store/orders', headers: [[ID_HEADER, 'replay']], body: Buffer.from('once more') })
  t.equal(replayed.body.toString(), 'after replay', 'a 401 replayed')
  const attempts = ti.upstream.seen('replay')
  t.equal(attempts.length, 2, 'once')
  t.not(attempts[0]?.rawHeaders.join(), attempts[1]?.rawHeaders.join(), 'with a new token')
  t.same(attempts[1]?.body(), Buffer.from('once more'))
  t.equal(ti.standIn.tokensIssued(), tokensBefore + 1)
}
