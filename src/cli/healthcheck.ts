import type * as Http from 'node:http'
import type * as Https from 'node:https'
import { createRequire } from 'node:module'

// node:http and node:https through require(), not ESM imports: the ESM facade of a builtin
// reads every export, and node:http's lazy WebSocket getters then load Node's bundled undici
// (a known Node.js behaviour): about 4 MiB and 50 ms of CPU more per check (measured 2026-11-23
// on Node.js 24.21, the bench machine; docs/performance.md).
const require = createRequire(import.meta.url)
const { get: httpGet } = require('node:http') as typeof Http
const { get: httpsGet } = require('node:https') as typeof Https

export interface ProbeResult {
  readonly ok: boolean
  /** One line for the operator: what was asked and what went wrong (or `answered 200`). */
  readonly message: string
}

/** /readyz explains itself in a short JSON `reason`; no more of a body than this is read. */
const MAX_BODY_BYTES = 16 * 1024
const MAX_REASON_CHARS = 200

const CONNECT_ERRORS: Record<string, string> = {
  ECONNREFUSED: 'refused the connection (nothing listens there)',
  ECONNRESET: 'reset the connection',
  ENOTFOUND: 'does not resolve',
  EAI_AGAIN: 'could not be resolved',
  EHOSTUNREACH: 'is unreachable',
  ENETUNREACH: 'is unreachable'
}

/**
 * Whether `url` answers 2xx within `timeoutMs`, and one line saying why not: the
 * `healthcheck` command's probe, for container HEALTHCHECKs that have no shell and no
 * curl (`docker inspect` shows the line). node:http alone, so that a check costs a few
 * milliseconds of CPU instead of loading fetch (internal undici) or the sidecar.
 */
export function probe (url: string, timeoutMs: number): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let target: URL
    try {
      target = new URL(url)
    } catch {
      resolve({ ok: false, message: `${JSON.stringify(url)} is not a valid URL` })
      return
    }
    if (target.protocol !== 'http:' && target.protocol !== 'https:') {
      resolve({ ok: false, message: `${target.href} is not an http:// or https:// URL` })
      return
    }
    const where = target.href
    let settled = false
    const done = (result: ProbeResult) => {
      if (settled) return
      settled = true
      clearTimeout(timer)
      request.destroy()
      resolve(result)
    }
    // One deadline for the whole exchange, answer body included.
    const timer = setTimeout(() => { done({ ok: false, message: `${where} did not answer within ${timeoutMs} ms` }) }, timeoutMs)
    const get = target.protocol === 'https:' ? httpsGet : httpGet
    const request = get(target, { agent: false }, (response) => {
      const status = response.statusCode ?? 0
      if (status >= 200 && status < 300) {
        done({ ok: true, message: `${where} answered ${status}` })
        return
      }
      const chunks: Buffer[] = []
      let size = 0
      const finish = () => {
        const reason = reasonOf(Buffer.concat(chunks).toString('utf8'))
        done({ ok: false, message: `${where} answered ${status}${reason === undefined ? '' : `: ${reason}`}` })
      }
      response.on('data', (chunk: Buffer) => {
        size += chunk.length
        if (size <= MAX_BODY_BYTES) chunks.push(chunk)
        else finish()
      })
      response.on('end', finish)
      response.on('error', finish)
    })
    request.on('error', (err: NodeJS.ErrnoException) => {
      const code = err.code ?? ''
      const what = CONNECT_ERRORS[code] ?? `failed: ${err.message}`
      done({ ok: false, message: `${where} ${what}${code === '' ? '' : ` (${code})`}` })
    })
  })
}

/** The `reason` of a JSON answer (/readyz's), on one line, or undefined. */
function reasonOf (body: string): string | undefined {
  let reason: unknown
  try {
    reason = (JSON.parse(body) as { reason?: unknown }).reason
  } catch {
    return undefined
  }
  if (typeof reason !== 'string' || reason === '') return undefined
  // eslint-disable-next-line no-control-regex
  const line = reason.replace(/[\x00-\x1f\x7f]+/g, ' ')
  return line.length > MAX_REASON_CHARS ? `${line.slice(0, MAX_REASON_CHARS)}…` : line
}
