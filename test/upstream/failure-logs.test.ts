import { Readable } from 'node:stream'
import t from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { startStalledUpstream, startUpstream } from '../helpers/upstream.js'

// What the log says when a request could not be forwarded: a refusal for want of a
// connection is a WARN with how many requests wait; a body over MAX_BODY_BYTES found while
// it streams is the caller's doing, answered 413 and not logged as the upstream's failure.

const WARN = 40

t.test('every connection busy and UPSTREAM_QUEUE_LIMIT reached: 503, and a WARN saying how many wait', async (t) => {
  const upstream = await startStalledUpstream(t)
  const { proxyUrl, logs } = await startSidecar(t, upstream.url, { UPSTREAM_QUEUE_LIMIT: '0' })
  const held = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) => {
    const res = await request(proxyUrl + `/held/${i}`)
    await res.body.dump()
    return res.statusCode
  })
  await eventually(t, `all ${UPSTREAM_CONNECTIONS} connections hold a request`, () => upstream.received.length === UPSTREAM_CONNECTIONS)
  const busy = await request(proxyUrl + '/one-more')
  t.equal(busy.statusCode, 503)
  t.match(await busy.body.json(), { error: 'UPSTREAM_BUSY' })
  const warnings = logs.entries().filter((e) => e.level === WARN)
  t.equal(warnings.length, 1, 'one WARN')
  t.equal(warnings[0]?.queued, 0, 'with the number of requests waiting for a connection')
  upstream.releaseAll()
  t.same(await Promise.all(held), Array(UPSTREAM_CONNECTIONS).fill(200))
})

t.test('a chunked body found over MAX_BODY_BYTES while it streams: 413, no WARN', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl, logs } = await startSidecar(t, upstream.url, { MAX_BODY_BYTES: '1000' })
  const body = Readable.from([Buffer.alloc(600, 'a'), Buffer.alloc(600, 'b')])
  const res = await request(proxyUrl + '/upload', { method: 'POST', body })
  t.equal(res.statusCode, 413)
  t.match(await res.body.json(), { error: 'BODY_TOO_LARGE' })
  t.same(logs.entries().filter((e) => (e.level as number) >= WARN), [], 'nothing at WARN or above')
})
