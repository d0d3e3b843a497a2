// A dot-segment with path parameters (`..;`, `.%2e;x`) is a dot-segment: servers that drop
// `;parameters` before resolving dot-segments (Tomcat, Spring, Jetty) read `/a/..;/b` as `/b`,
// and so does the rules' matcher. Found by an outside review: such targets passed
// ALLOWED_ROUTES and TEST_ORDERS (a route allowed as one reached another, unbudgeted and
// unkeyed). Each is now refused before anything is sent.
import t from 'tap'
import { rawRequest, statusOf } from '../helpers/raw-http.js'
import { startSidecar } from '../helpers/build.js'
import { startUpstream } from '../helpers/upstream.js'

const send = async (proxyUrl: string, method: string, target: string): Promise<number> =>
  statusOf(await rawRequest(proxyUrl, `${method} ${target} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`))

t.test('ALLOWED_ROUTES: `..;` segments are refused with 400, nothing reaches TI', async (t) => {
  const ti = await startUpstream(t)
  const sidecar = await startSidecar(t, ti.url, { ALLOWED_ROUTES: 'GET /v2/store/products/**; POST /v2/store/carts/**' })
  for (const [method, target] of [
    ['GET', '/v2/store/products/..;/orders/123'],
    ['GET', '/v2/store/products/.%2e;/..;/customers'],
    ['POST', '/v2/store/carts/..;/orders'],
    ['POST', '/v2/store/carts/.;x/../orders']
  ] as const) {
    t.equal(await send(sidecar.proxyUrl, method, target), 400, `${method} ${target}`)
  }
  t.equal(await send(sidecar.proxyUrl, 'GET', '/v2/store/products/a;v=1'), 200, 'a parameter on an ordinary segment still passes')
  t.same(ti.received.map((r) => r.url), ['/v2/store/products/a;v=1'], 'TI got only that one')
})

t.test('TEST_ORDERS=true: POST /v2/store/x/..;/orders is refused, not sent as is', async (t) => {
  const ti = await startUpstream(t)
  const sidecar = await startSidecar(t, ti.url, { TEST_ORDERS: 'true' })
  t.equal(await send(sidecar.proxyUrl, 'POST', '/v2/store/x/..;/orders'), 400)
  t.equal(ti.received.length, 0)
})
