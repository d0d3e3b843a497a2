// Expect: 100-continue answered from the head (every listener bounded, case 5; RFC 9110 §10.1.1): 100 only
// when the request will be admitted; otherwise the final status (413 over MAX_BODY_BYTES by its
// Content-Length, 503 while shedding), and the body is never invited.
import { connect } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startUpstream } from '../helpers/upstream.js'

/**
 * Sends a head with Expect: 100-continue and waits for the first answer: the body is sent only
 * if that answer is 100. Returns every status line seen, in order, and whether the body went.
 */
async function expectContinue (url: string, length: number): Promise<{ statuses: number[], bodySent: boolean, closed: boolean }> {
  const { hostname, port } = new URL(url)
  const socket = connect(Number(port), hostname)
  socket.on('error', () => {})
  let text = ''
  let bodySent = false
  return await new Promise((resolve) => {
    const done = (closed: boolean): void => {
      socket.destroy()
      resolve({ statuses: [...text.matchAll(/HTTP\/1\.1 (\d{3})/g)].map((m) => Number(m[1])), bodySent, closed })
    }
    socket.setEncoding('latin1')
    socket.on('data', (chunk: string) => {
      text += chunk
      if (!bodySent && text.startsWith('HTTP/1.1 100 ')) {
        bodySent = true
        socket.write(Buffer.alloc(length, 'b'))
      }
      if (/HTTP\/1\.1 [2-5]\d\d [^]*\r\n\r\n/.test(text) && /\}$/.test(text)) setTimeout(() => { done(false) }, 200)
    })
    socket.on('close', () => { done(true) })
    socket.write(`POST /v2/store/upload HTTP/1.1\r\nHost: x\r\nContent-Type: application/octet-stream\r\nContent-Length: ${length}\r\nExpect: 100-continue\r\n\r\n`)
  })
}

t.test('admitted: 100 Continue, then the body, then the answer', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url, { MAX_BODY_BYTES: '1000' })
  const seen = await expectContinue(proxyUrl, 1000)
  t.same(seen.statuses, [100, 200])
  t.ok(seen.bodySent)
  t.equal(upstream.received[0]?.body.length, 1000, 'the body reached the upstream')
})

t.test('over MAX_BODY_BYTES by Content-Length: 413 without 100, the body never invited, the connection closed', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url, { MAX_BODY_BYTES: '1000' })
  const seen = await expectContinue(proxyUrl, 50 * 1024 * 1024)
  t.same(seen.statuses, [413])
  t.notOk(seen.bodySent, 'no body sent')
  t.equal(upstream.received.length, 0)
})

t.test('shedding (the in-flight cap reached): 503 without 100, the body never invited', async (t) => {
  let release: () => void = () => {}
  const held = new Promise<void>((resolve) => { release = resolve })
  const upstream = await startUpstream(t, (_req, res) => { void held.then(() => { res.end('late') }) })
  const { proxyUrl, app } = await startSidecar(t, upstream.url, { MAX_IN_FLIGHT_REQUESTS: '1' })
  const first = request(`${proxyUrl}/v2/store/slow`)
  await eventually(t, 'one request in flight', () => app.overload.status().inFlight === 1)
  const seen = await expectContinue(proxyUrl, 50 * 1024 * 1024)
  t.same(seen.statuses, [503])
  t.notOk(seen.bodySent, 'no body sent')
  release()
  await (await first).body.dump()
})

t.test('too many header fields: 431 without 100', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url, { MAX_HEADER_COUNT: '16' })
  const { hostname, port } = new URL(proxyUrl)
  const socket = connect(Number(port), hostname)
  t.teardown(() => socket.destroy())
  let text = ''
  socket.setEncoding('latin1').on('data', (chunk: string) => { text += chunk })
  socket.write(`POST /v2/store/u HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\nExpect: 100-continue\r\n${'a: b\r\n'.repeat(20)}\r\n`)
  await new Promise((resolve) => socket.once('close', resolve))
  t.match(text, /^HTTP\/1\.1 431 /, 'the final status first')
  t.notMatch(text, /HTTP\/1\.1 100/)
})
