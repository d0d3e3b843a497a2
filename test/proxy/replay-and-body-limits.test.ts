import { Readable } from 'node:stream'
import type { ServerResponse } from 'node:http'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { REPLAY_BODY_MAX_BYTES, REPLAY_BUFFER_TOTAL_BYTES } from '../../src/proxy/plugin.js'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { startUpstream } from '../helpers/upstream.js'

// Where the body limits lie: MAX_BODY_BYTES for a chunked body (counted as it streams),
// REPLAY_BODY_MAX_BYTES for a body kept for a replay after a 401, and
// REPLAY_BUFFER_TOTAL_BYTES for all kept bodies at once, each given back when its
// exchange closes.

/** A body with no length announced: it goes as chunked transfer coding. */
const chunked = (size: number): Readable => Readable.from((function * () {
  for (let sent = 0; sent < size; sent += 10_000) yield Buffer.alloc(Math.min(10_000, size - sent), 'c')
})())

t.test('MAX_BODY_BYTES: a chunked body of exactly that many bytes is forwarded, one byte more is 413', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url, { MAX_BODY_BYTES: '50000' })
  const fits = await request(proxyUrl + '/x', { method: 'POST', body: chunked(50_000) })
  t.equal(fits.statusCode, 200)
  await fits.body.dump()
  t.equal(upstream.received[0]?.body.length, 50_000)
  const over = await request(proxyUrl + '/x', { method: 'POST', body: chunked(50_001) })
  t.equal(over.statusCode, 413)
  await over.body.dump()
})

t.test('MAX_BODY_BYTES unset: a chunked body has no limit either', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/x', { method: 'POST', body: chunked(300_000) })
  t.equal(res.statusCode, 200)
  await res.body.dump()
  t.equal(upstream.received[0]?.body.length, 300_000)
})

/** An upstream that answers 401 to the first request on each path of `rejected`, 200 after; holds `/held*` until told. */
async function rejectingUpstream (t: Test) {
  const seen = new Map<string, number>()
  const held: ServerResponse[] = []
  const upstream = await startUpstream(t, (req, res, received) => {
    const path = req.url ?? ''
    const n = (seen.get(path) ?? 0) + 1
    seen.set(path, n)
    if (path.startsWith('/held')) {
      held.push(res)
      return
    }
    if (n === 1) {
      res.writeHead(401, { 'content-type': 'application/json' })
      res.end('{"fault":{"faultstring":"Invalid Access Token"}}')
      return
    }
    res.end(`got ${received.body.length}`)
  })
  return { ...upstream, times: (path: string) => seen.get(path) ?? 0, releaseHeld: () => { for (const res of held.splice(0)) res.end('done') }, held: () => held.length }
}

t.test(`a body of exactly REPLAY_BODY_MAX_BYTES (${REPLAY_BODY_MAX_BYTES}) is kept and replayed after a 401`, async (t) => {
  const upstream = await rejectingUpstream(t)
  const { proxyUrl } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/edge', { method: 'PUT', body: Buffer.alloc(REPLAY_BODY_MAX_BYTES, 'e') })
  t.equal(res.statusCode, 200)
  t.equal(await res.body.text(), `got ${REPLAY_BODY_MAX_BYTES}`)
  t.equal(upstream.times('/edge'), 2, 'sent, then replayed')
})

t.test('REPLAY_BUFFER_TOTAL_BYTES: past it a small body streams (its 401 goes back); kept bytes are given back when exchanges close', async (t) => {
  const each = REPLAY_BODY_MAX_BYTES
  const holding = REPLAY_BUFFER_TOTAL_BYTES / each
  t.ok(holding <= UPSTREAM_CONNECTIONS, 'every holding request has a connection of its own')
  const upstream = await rejectingUpstream(t)
  const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url, { UPSTREAM_QUEUE_TIMEOUT_MS: '60000' })
  const holders = Array.from({ length: holding }, async (_, i) => {
    const res = await request(proxyUrl + `/held${i}`, { method: 'PUT', body: Buffer.alloc(each, 'h') })
    await res.body.dump()
    return res.statusCode
  })
  await eventually(t, `the upstream holding ${holding} requests`, () => upstream.held() === holding, 30_000)

  // Every connection is taken: this one waits in the queue, its body read as it came.
  const fullAnswer = request(proxyUrl + '/full', { method: 'PUT', body: Buffer.alloc(10, 'f') })
  await eventually(t, 'the small body queued', async () => await metricValue(adminUrl, 'store_auth_proxy_upstream_queued_requests') === 1)
  upstream.releaseHeld()
  t.same(await Promise.all(holders), Array(holding).fill(200))
  const full = await fullAnswer
  t.equal(full.statusCode, 401, 'not kept, so not replayed: the upstream\'s 401')
  await full.body.dump()
  t.equal(upstream.times('/full'), 1)

  const after = await request(proxyUrl + '/after', { method: 'PUT', body: Buffer.alloc(each, 'a') })
  t.equal(after.statusCode, 200, 'kept again once the others closed, and replayed')
  t.equal(await after.body.text(), `got ${each}`)
  t.equal(upstream.times('/after'), 2)
})
