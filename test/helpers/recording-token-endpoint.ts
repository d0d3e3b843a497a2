import { randomBytes } from 'node:crypto'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'

/**
 * A token endpoint that issues a fresh token (TI's documented answer) to every
 * POST and remembers each one, so a test can search logs and upstream requests for
 * them. `setDown(true)` makes it answer 503 until set back.
 */
export async function startRecordingTokenEndpoint (t: Test, { expiresInS = 3599 } = {}) {
  const issued: string[] = []
  let down = false
  const server = createServer((req, res) => {
    req.resume()
    req.on('end', () => {
      if (down) {
        res.writeHead(503, { 'content-type': 'text/plain' })
        res.end('down')
        return
      }
      const token = randomBytes(24).toString('base64url')
      issued.push(token)
      res.writeHead(200, { 'content-type': 'application/json' })
      res.end(JSON.stringify({ access_token: token, token_type: 'bearer', expires_in: expiresInS }))
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    server.closeAllConnections()
    server.close(() => { resolve() })
  }))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    issued,
    setDown: (value: boolean) => { down = value }
  }
}
