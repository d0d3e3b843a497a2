import { request as httpRequest } from 'node:http'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { startUpstream } from '../helpers/upstream.js'

// Issue "Forward faithfully", A.1: the request path never parses, decodes or re-encodes
// a body of any type; MAX_BODY_BYTES is the only limit.

async function setup (t: Test, env: Record<string, string> = {}) {
  const upstream = await startUpstream(t)
  return { upstream, ...await startSidecar(t, upstream.url, env) }
}

const noErrorLogged = (t: Test, entries: Array<Record<string, unknown>>): void => {
  t.same(entries.filter((e) => (e.level as number) >= 50), [], 'no ERROR line')
}

t.test('text/plain: what fetch sends for a JSON string without a content-type header, forwarded byte for byte', async (t) => {
  const { proxyUrl, upstream, logs } = await setup(t)
  const body = JSON.stringify({ lineItems: [{ tiPartNumber: 'LM358BIDR', quantity: 10 }] })
  const res = await fetch(proxyUrl + '/v2/store/orders', { method: 'POST', body })
  t.equal(res.status, 200)
  t.equal(upstream.received[0]?.headers['content-type'], 'text/plain;charset=UTF-8')
  t.equal(upstream.received[0]?.body.toString(), body)
  noErrorLogged(t, logs.entries())
})

t.test('text/plain with bytes that are not UTF-8: the upstream gets the same bytes', async (t) => {
  const { proxyUrl, upstream } = await setup(t)
  const body = Buffer.from([0xff, 0xfe, 0xc3, 0x28, 0x41, 0xe2, 0x82])
  for (const type of ['text/plain', 'text/plain; charset=iso-8859-1', 'text/plain; charset=utf-8']) {
    const res = await request(proxyUrl + '/x', { method: 'PUT', headers: { 'content-type': type }, body })
    t.equal(res.statusCode, 200, type)
    await res.body.dump()
    t.same(upstream.received.at(-1)?.body, body, type)
  }
})

t.test('a text body over 1 MiB passes with MAX_BODY_BYTES unset (no hidden parser limit)', async (t) => {
  const { proxyUrl, upstream } = await setup(t)
  const body = Buffer.alloc(3 * 1024 * 1024, 'a')
  const res = await request(proxyUrl + '/x', { method: 'POST', headers: { 'content-type': 'text/plain' }, body })
  t.equal(res.statusCode, 200)
  await res.body.dump()
  t.equal(upstream.received[0]?.body.length, body.length)
})

t.test('chunked text with MAX_BODY_BYTES: under the limit forwarded, over it 413 BODY_TOO_LARGE', async (t) => {
  const { proxyUrl, upstream } = await setup(t, { MAX_BODY_BYTES: '100000' })
  const send = async (size: number) => await new Promise<{ status: number, body: string }>((resolve, reject) => {
    const req = httpRequest(proxyUrl + '/x', { method: 'POST', headers: { 'content-type': 'text/plain', 'transfer-encoding': 'chunked' } }, (res) => {
      let text = ''
      res.on('data', (c: Buffer) => { text += c.toString() })
      res.on('end', () => { resolve({ status: res.statusCode ?? 0, body: text }) })
    })
    req.on('error', reject)
    for (let sent = 0; sent < size; sent += 10_000) req.write(Buffer.alloc(Math.min(10_000, size - sent), 'b'))
    req.end()
  })
  const small = await send(50_000)
  t.equal(small.status, 200)
  t.equal(upstream.received[0]?.body.length, 50_000)
  const large = await send(300_000)
  t.equal(large.status, 413)
  t.same(JSON.parse(large.body), { error: 'BODY_TOO_LARGE', message: 'the request body exceeds 100000 bytes' })
})

t.test('content types Fastify would refuse or parse are the upstream\'s business: forwarded as sent', async (t) => {
  const { proxyUrl, upstream } = await setup(t)
  const body = Buffer.from('{"not": "checked"')
  const types = ['foo', 'application/json', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=x',
    'application/octet-stream', 'application/vnd.made-up+json; v=2', 'text/plain;;', 'application/json; charset=latin1']
  for (const type of types) {
    const res = await request(proxyUrl + '/x', { method: 'POST', headers: { 'content-type': type }, body })
    t.equal(res.statusCode, 200, type)
    await res.body.dump()
    t.equal(upstream.received.at(-1)?.headers['content-type'], type, type)
    t.same(upstream.received.at(-1)?.body, body, type)
  }
  const untyped = await request(proxyUrl + '/x', { method: 'POST', body })
  t.equal(untyped.statusCode, 200, 'no content type')
  await untyped.body.dump()
  t.same(upstream.received.at(-1)?.body, body)
})
