import t from 'tap'
import { createCaller } from '../../src/demo/caller.js'
import { build, startStandIn } from '../helpers/build.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

t.test('the example caller reaches the store API through the sidecar and logs what it got', async (t) => {
  const standIn = await startStandIn(t)
  const { proxyUrl } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url })
  const logs = captureLogs()
  const { clock } = fakeClock()
  const caller = createCaller({ targetUrl: `${proxyUrl}/v2/store/products/LM358BIDR?currency=USD`, intervalMs: 1000, timeoutMs: 2000, log: logs.log, clock })
  t.equal(await caller.callOnce(), 200)
  t.match(logs.entries()[0], { status: 200, tiPartNumber: 'LM358BIDR', quantity: 24000 })
})

t.test('a failing call is logged, not thrown', async (t) => {
  const logs = captureLogs()
  const { clock } = fakeClock()
  const caller = createCaller({ targetUrl: 'http://127.0.0.1:1/x', intervalMs: 1000, timeoutMs: 500, log: logs.log, clock })
  t.equal(await caller.callOnce(), 0)
  t.match(logs.entries()[0], { level: 40, msg: 'store API call failed' })
})
