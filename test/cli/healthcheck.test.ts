import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net'
import t from 'tap'
import { probe } from '../../src/cli/healthcheck.js'
import { startUpstream } from '../helpers/upstream.js'

t.test('probe: ok for 2xx, not ok for any other status, with the status in the line', async (t) => {
  const upstream = await startUpstream(t, (req, res) => {
    res.statusCode = Number(req.url?.slice(1))
    res.end('body that is drained, not read')
  })
  t.same(await probe(`${upstream.url}/200`, 1000), { ok: true, message: `${upstream.url}/200 answered 200` })
  t.equal((await probe(`${upstream.url}/204`, 1000)).ok, true)
  for (const status of [301, 401, 500, 503]) {
    t.same(await probe(`${upstream.url}/${status}`, 1000), { ok: false, message: `${upstream.url}/${status} answered ${status}` }, String(status))
  }
})

t.test('probe: a not-ready /readyz answer gives its reason, on one line', async (t) => {
  const upstream = await startUpstream(t, (_req, res) => {
    res.statusCode = 503
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ status: 'not ready', reason: 'client credentials rejected\nby the token endpoint', token: { valid: false } }))
  })
  const result = await probe(`${upstream.url}/readyz`, 1000)
  t.same(result, { ok: false, message: `${upstream.url}/readyz answered 503: client credentials rejected by the token endpoint` })
})

t.test('probe: says refused, bad URL, or timed out', async (t) => {
  const sockets: Socket[] = []
  const silent = createTcpServer((socket) => { sockets.push(socket) })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close() })
  const { port } = silent.address() as AddressInfo

  const refused = await probe('http://127.0.0.1:1/readyz', 1000)
  t.same(refused, { ok: false, message: 'http://127.0.0.1:1/readyz refused the connection (nothing listens there) (ECONNREFUSED)' })
  t.same(await probe('not a url', 1000), { ok: false, message: '"not a url" is not a valid URL' })
  const started = Date.now()
  t.same(await probe(`http://127.0.0.1:${port}/readyz`, 200),
    { ok: false, message: `http://127.0.0.1:${port}/readyz did not answer within 200 ms` }, 'accepted but never answered')
  t.ok(Date.now() - started < 2000, 'gives up after its timeout')
})

t.test('probe: an answer whose body never ends still times out', async (t) => {
  const upstream = await startUpstream(t, (_req, res) => {
    res.statusCode = 503
    res.write('{"reason":')
  })
  t.same(await probe(`${upstream.url}/readyz`, 300), { ok: false, message: `${upstream.url}/readyz did not answer within 300 ms` })
})
