import { createServer, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

export type Fault = 'ok' | 'error500' | 'hang' | 'garbage' | 'invalid_client' | 'rate_limited' | 'same_token'

/**
 * A token endpoint in front of a real one (the stand-in) that injects the fault
 * the test sets: 500, a hang, an HTML 200, Apigee's 401 invalid_client, 429 with
 * Retry-After, or the previous token again. Records when each request arrived.
 */
export async function startFaultyTokenEndpoint (t: Test, realUrl: string, { retryAfterS = 2 } = {}) {
  let fault: Fault = 'ok'
  let lastGood: string | undefined
  const arrivals: Array<{ at: number, fault: Fault }> = []
  const hanging: ServerResponse[] = []
  const server = createServer((req, res) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => chunks.push(c))
    req.on('end', () => {
      arrivals.push({ at: Date.now(), fault })
      const json = (status: number, body: unknown, headers: Record<string, string> = {}) => {
        res.writeHead(status, { 'content-type': 'application/json', ...headers })
        res.end(JSON.stringify(body))
      }
      switch (fault) {
        case 'error500': res.writeHead(500); res.end('Internal Server Error'); return
        case 'hang': hanging.push(res); return
        case 'garbage': res.writeHead(200, { 'content-type': 'text/html' }); res.end('<html><body>Gateway maintenance</body></html>'); return
        case 'invalid_client': json(401, { ErrorCode: 'invalid_client', Error: 'ClientId is Invalid' }); return
        case 'rate_limited': json(429, { fault: { faultstring: 'Rate limit quota violation', detail: { errorcode: 'policies.ratelimit.QuotaViolation' } } }, { 'retry-after': String(retryAfterS) }); return
        case 'same_token':
          if (lastGood !== undefined) { res.writeHead(200, { 'content-type': 'application/json' }); res.end(lastGood); return }
      }
      fetch(realUrl + (req.url ?? ''), { method: 'POST', headers: { 'content-type': String(req.headers['content-type']) }, body: Buffer.concat(chunks) })
        .then(async (real) => {
          const text = await real.text()
          if (real.status === 200) lastGood = text
          res.writeHead(real.status, { 'content-type': 'application/json' })
          res.end(text)
        }, () => { res.writeHead(502); res.end() })
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const res of hanging) res.destroy()
    server.closeAllConnections()
    server.close(() => { resolve() })
  }))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    arrivals,
    requests: () => arrivals.length,
    setFault: (f: Fault) => { fault = f }
  }
}
