// A fill's caller that half-closes its connection (sends FIN) while the fill waits for an
// upstream connection, its socket still busy with an earlier pipelined answer: Node ends the
// socket at once and closes the response only later. The fill is dropped unsent, and the
// request path must read that caller as gone too, or the key's flight stays open and every
// later caller of the key waits for it.
import { connect, type Socket } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { cacheSidecar, startTi } from '../cache/fixture.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'

const BIG = Buffer.alloc(40 * 1024 * 1024, 'x')

for (const halfClose of [false, true]) {
  t.test(`the fill's caller ${halfClose ? 'half-closes' : 'closes'} while the fill is queued: the key's next callers are answered`, async (t) => {
    const ti = await startTi(t)
    ti.answer((req) => req.url === '/v2/store/big' ? { status: 200, body: BIG } : { status: 200, body: `for ${req.url}` })
    const s = await cacheSidecar(t, ti, {
      RATE_LIMITS: 'GET /v2/store/** 1000/1h cache=1h',
      CACHE_MAX_BYTES: String(128 * 1024 * 1024),
      CACHE_ENTRY_MAX_BYTES: String(64 * 1024 * 1024),
      UPSTREAM_QUEUE_TIMEOUT_MS: '20000',
      UPSTREAM_TIMEOUT_MS: '20000',
      RATE_LIMIT_MAX_WAIT_MS: '0'
    })
    // A large stored answer: a hit the pipelining caller below never reads.
    t.equal((await s.get('/v2/store/big')).status, 200)
    ti.hold()
    const held = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) => {
      const res = await request(s.proxyUrl + `/v2/store/held/${i}`)
      await res.body.dump()
      return res.statusCode
    })
    await eventually(t, 'every upstream connection holds a request', () => ti.waiting() === UPSTREAM_CONNECTIONS)
    const accepted = new Promise<Socket>((resolve) => { s.app.proxy.server.once('connection', resolve) })
    const sock = connect({ host: '127.0.0.1', port: Number(new URL(s.proxyUrl).port), allowHalfOpen: true })
    const theirs = await accepted
    sock.pause()
    sock.write('GET /v2/store/big HTTP/1.1\r\nHost: x\r\n\r\nGET /v2/store/victim HTTP/1.1\r\nHost: x\r\n\r\n')
    await eventually(t, 'the victim\'s fill waits for a connection', async () =>
      (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_upstream_queued_requests', {})) === 1)
    if (halfClose) sock.end()
    else sock.destroy()
    await eventually(t, 'the sidecar has seen the caller close its side', () => !theirs.writable)
    ti.release()
    t.same(await Promise.all(held), Array(UPSTREAM_CONNECTIONS).fill(200))
    const answer = async (): Promise<string> => await request(s.proxyUrl + '/v2/store/victim', { signal: AbortSignal.timeout(5_000) })
      .then(async (r) => `${r.statusCode} ${await r.body.text()}`, (err: Error) => `no answer in 5 s (${err.name})`)
    t.equal(await answer(), '200 for /v2/store/victim', 'the key\'s next caller is answered')
    // The half-closed caller goes at last: its close changes nothing for the key.
    sock.destroy()
    await eventually(t, 'nothing in flight', async () =>
      ((await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_requests_in_flight', {})) ?? 0) === 0)
    t.equal(await answer(), '200 for /v2/store/victim', 'and the one after')
    t.equal(ti.received.filter((r) => r.url === '/v2/store/victim').length, 1, 'TI was asked for the key once')
  })
}
