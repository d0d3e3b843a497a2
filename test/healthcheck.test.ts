import { createServer as createTcpServer, type AddressInfo, type Socket } from 'node:net'
import t from 'tap'
import { answersOk } from '../src/healthcheck.js'
import { startUpstream } from './helpers/upstream.js'

t.test('answersOk: true for 2xx, false for any other status', async (t) => {
  const upstream = await startUpstream(t, (req, res) => {
    res.statusCode = Number(req.url?.slice(1))
    res.end('body that is drained, not read')
  })
  t.equal(await answersOk(`${upstream.url}/200`, 1000), true)
  t.equal(await answersOk(`${upstream.url}/204`, 1000), true)
  for (const status of [301, 401, 500, 503]) t.equal(await answersOk(`${upstream.url}/${status}`, 1000), false, String(status))
})

t.test('answersOk: false when nothing listens, the URL is bad, or no answer comes in time', async (t) => {
  const sockets: Socket[] = []
  const silent = createTcpServer((socket) => { sockets.push(socket) })
  await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close() })
  const { port } = silent.address() as AddressInfo

  t.equal(await answersOk('http://127.0.0.1:1/readyz', 1000), false, 'connection refused')
  t.equal(await answersOk('not a url', 1000), false, 'bad URL')
  const started = Date.now()
  t.equal(await answersOk(`http://127.0.0.1:${port}/readyz`, 200), false, 'accepted but never answered')
  t.ok(Date.now() - started < 2000, 'gives up after its timeout')
})
