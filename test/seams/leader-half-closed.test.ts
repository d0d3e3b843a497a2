// A fill's caller that half-closes its connection (sends FIN) while its socket is still busy
// with an earlier pipelined answer: Node ends the socket at once and closes the response only
// later. The request path and the upstream exchange must both read that caller as gone, as
// they do a caller whose connection closed: a fill still queued is dropped and its waiters sent
// on (or the key's flight stays open and every later caller waits for it); a fill answered 401
// is replayed for its waiters.
import { connect, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { request } from 'undici'
import { UPSTREAM_CONNECTIONS } from '../../src/app.js'
import { cacheSidecar, inFlight, startTi, type CacheSidecar, type Ti } from '../cache/fixture.js'
import { eventually } from '../helpers/eventually.js'
import { scrape, seriesKey } from '../helpers/metrics-scrape.js'

const BIG = Buffer.alloc(40 * 1024 * 1024, 'x')
const ENV = {
  RATE_LIMITS: 'GET /v2/store/** 1000/1h cache=1h',
  CACHE_MAX_BYTES: String(128 * 1024 * 1024),
  CACHE_ENTRY_MAX_BYTES: String(64 * 1024 * 1024),
  UPSTREAM_QUEUE_TIMEOUT_MS: '20000',
  UPSTREAM_TIMEOUT_MS: '20000',
  RATE_LIMIT_MAX_WAIT_MS: '0'
}

/** A caller that pipelines a large stored answer it never reads, then GET /v2/store/victim. */
async function pipeliningCaller (t: Test, ti: Ti, s: CacheSidecar) {
  t.equal((await s.get('/v2/store/big')).status, 200, 'the large answer stored')
  const accepted = new Promise<Socket>((resolve) => { s.app.proxy.server.once('connection', resolve) })
  const sock = connect({ host: '127.0.0.1', port: Number(new URL(s.proxyUrl).port), allowHalfOpen: true })
  t.teardown(() => { sock.destroy() })
  sock.on('error', () => {})
  const theirs = await accepted
  sock.pause()
  sock.write('GET /v2/store/big HTTP/1.1\r\nHost: x\r\n\r\nGET /v2/store/victim HTTP/1.1\r\nHost: x\r\n\r\n')
  return {
    /** Half-closes (FIN), and waits until the sidecar has ended its side; or closes outright. */
    async leave (halfClose: boolean, inFlightAfterClose: number): Promise<void> {
      if (halfClose) {
        sock.end()
        await eventually(t, 'the sidecar has seen the caller close its side', () => !theirs.writable)
      } else {
        sock.destroy()
        await inFlight(t, s, inFlightAfterClose)
      }
    },
    destroy: () => { sock.destroy() }
  }
}

const victim = async (s: CacheSidecar): Promise<string> => await request(s.proxyUrl + '/v2/store/victim', { signal: AbortSignal.timeout(5_000) })
  .then(async (r) => `${r.statusCode} ${await r.body.text()} ${String(r.headers['cache-status'])}`, (err: Error) => `no answer in 5 s (${err.name})`)

for (const halfClose of [false, true]) {
  t.test(`the fill's caller ${halfClose ? 'half-closes' : 'closes'} while the fill is queued: the key's next callers are answered`, async (t) => {
    const ti = await startTi(t)
    ti.answer((req) => req.url === '/v2/store/big' ? { status: 200, body: BIG } : { status: 200, body: `for ${req.url}` })
    const s = await cacheSidecar(t, ti, ENV)
    const caller = await pipeliningCaller(t, ti, s)
    ti.hold()
    const held = Array.from({ length: UPSTREAM_CONNECTIONS }, async (_, i) => {
      const res = await request(s.proxyUrl + `/v2/store/held/${i}`)
      await res.body.dump()
      return res.statusCode
    })
    await eventually(t, 'every upstream connection holds a request, the victim\'s fill queued', async () => ti.waiting() === UPSTREAM_CONNECTIONS &&
      (await scrape(s.adminUrl)).get(seriesKey('store_auth_proxy_upstream_queued_requests', {})) === 1)
    await caller.leave(halfClose, UPSTREAM_CONNECTIONS)
    ti.release()
    t.same(await Promise.all(held), Array(UPSTREAM_CONNECTIONS).fill(200))
    t.match(await victim(s), /^200 for \/v2\/store\/victim /, 'the key\'s next caller is answered')
    // The half-closed caller goes at last: its close changes nothing for the key.
    caller.destroy()
    await inFlight(t, s, 0)
    t.match(await victim(s), /^200 for \/v2\/store\/victim .*; hit/, 'and the one after, from the cache')
    t.equal(ti.received.filter((r) => r.url === '/v2/store/victim').length, 1, 'TI was asked for the key once')
  })

  t.test(`a fill answered 401, its caller ${halfClose ? 'half-closed' : 'gone'}, one waiter: replayed for the waiter`, async (t) => {
    const ti = await startTi(t)
    let asked = 0
    ti.answer((req) => {
      if (req.url === '/v2/store/big') return { status: 200, body: BIG }
      asked += 1
      return asked === 1 ? { status: 401, body: 'revoked' } : { status: 200, body: 'victim' }
    })
    const s = await cacheSidecar(t, ti, ENV)
    const caller = await pipeliningCaller(t, ti, s)
    ti.hold()
    await eventually(t, 'the victim\'s fill held at TI', () => ti.waiting() === 1)
    const waiter = victim(s)
    await inFlight(t, s, 3)
    await caller.leave(halfClose, 1)
    ti.release()
    t.equal(await waiter, '200 victim store-auth-proxy; hit; ttl=3600; detail=coalesced', 'the waiter is served by the replay')
    t.equal(ti.received.filter((r) => r.url === '/v2/store/victim').length, 2, 'the 401, then the replay for the waiter')
  })
}
