import { readFileSync } from 'node:fs'
import { getCACertificates, setDefaultCACertificates } from 'node:tls'
import type { Test } from 'tap'
import { call, type CallerResult } from '../helpers/caller.js'
import { startStandIn } from '../helpers/build.js'
import { startRecordingProxy, startTlsFront, type RecordingProxyOptions } from '../helpers/recording-proxy.js'
import { startRecordingUpstream } from '../helpers/recording-upstream.js'

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
