// What the sidecar exports for a request, read by a stand-in OTLP/HTTP receiver: a server
// span continuing the caller's traceparent, a client span per send to TI whose traceparent TI
// receives, and the decisions as events: a miss, a stored answer, a budget refusal, a 401
// replay, a wait for the token (linked to the token request's span), a shed request.
import t, { type Test } from 'tap'
import { request } from 'undici'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { ID_HEADER, startRecordingUpstream, type RecordingUpstream } from '../helpers/recording-upstream.js'
import { startReceiver, type Seen } from './receiver.js'

const CALLER_TRACE = '4bf92f3577b34da6a3ce929d0e0e4736'
const CALLER_SPAN = '00f067aa0ba902b7'
const SERVER = 2
const CLIENT = 3

async function tracedSidecar (t: Test, env: Record<string, string> = {}, { start = true } = {}) {
  const receiver = await startReceiver(t)
  const upstream = await startRecordingUpstream(t)
  const standIn = await startStandIn(t)
  const sidecar = await build(t, {
    AUTH_URL: standIn.url,
    UPSTREAM_URL: upstream.url,
    OTEL_EXPORTER_OTLP_ENDPOINT: receiver.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    OTEL_BSP_SCHEDULE_DELAY: '10',
    OTEL_SERVICE_NAME: 'shop-sidecar',
    ...env
  }, {}, { start })
  return { receiver, upstream, standIn, sidecar }
}

async function call (proxyUrl: string, path: string, id: string, traceparent = `00-${CALLER_TRACE}-${CALLER_SPAN}-01`): Promise<{ status: number, headers: Record<string, unknown> }> {
  const res = await request(proxyUrl + path, { headers: { [ID_HEADER]: id, traceparent } })
  await res.body.text()
  return { status: res.statusCode, headers: res.headers }
}

/** The server span of a request (by its url.path) once exported, with its trace's other spans. */
async function serverSpan (t: Test, receiver: Awaited<ReturnType<typeof startReceiver>>, match: (s: Seen) => boolean): Promise<Seen> {
  await eventually(t, 'the server span exported', () => receiver.spans.some((s) => s.kind === SERVER && match(s)))
  return receiver.spans.find((s) => s.kind === SERVER && match(s)) as Seen
}

const traceparentAt = (upstream: RecordingUpstream, id: string, attempt = 0): string | undefined => {
  const raw = upstream.seen(id)[attempt]?.rawHeaders ?? []
  const at = raw.findIndex((h, i) => i % 2 === 0 && h.toLowerCase() === 'traceparent')
  return at === -1 ? undefined : raw[at + 1]
}

t.test('a miss: the server span continues the caller\'s trace; TI receives the client span\'s traceparent', async (t) => {
  const { receiver, upstream, sidecar } = await tracedSidecar(t, { RATE_LIMITS: 'GET /v2/store/orders/** 5/1h' })
  t.equal((await call(sidecar.proxyUrl, '/v2/store/orders/1?x=secret', 'a')).status, 200)
  const server = await serverSpan(t, receiver, () => true)
  t.equal(server.traceId, CALLER_TRACE, 'the caller\'s trace')
  t.equal(server.parentSpanId, CALLER_SPAN, 'the caller\'s span as parent')
  t.equal(server.name, 'GET /v2/store/orders/**', 'named by the rule\'s route')
  t.match(server.attributes, { 'http.request.method': 'GET', 'url.path': '/v2/store/orders/1', 'http.route': '/v2/store/orders/**', 'http.response.status_code': 200 })
  t.notOk(JSON.stringify(server).includes('secret'), 'no query string in any attribute')
  t.match(server.events.find((e) => e.name === 'quota')?.attributes, { 'quota.rule': 'GET /v2/store/orders/**', 'quota.verdict': 'admitted', 'quota.backend': 'memory' })
  t.equal(server.resource['service.name'], 'shop-sidecar')
  await eventually(t, 'the client span exported', () => receiver.spans.some((s) => s.kind === CLIENT))
  const client = receiver.spans.find((s) => s.kind === CLIENT) as Seen
  t.equal(client.parentSpanId, server.spanId, 'the send is a child of the request')
  t.match(client.attributes, { 'http.request.method': 'GET', 'http.response.status_code': 200, 'server.address': '127.0.0.1', 'egress.route': 'direct (no proxy set)' })
  t.equal(traceparentAt(upstream, 'a'), `00-${CALLER_TRACE}-${client.spanId}-01`, 'TI received the client span as its parent, not the caller\'s')
  const logged = sidecar.logs.entries().filter((e) => e.trace_id !== undefined)
  t.ok(logged.every((e) => e.trace_id === CALLER_TRACE), 'a request\'s log lines carry its trace id')
})

t.test('a refusal, a stored answer, a 401 replay: each decision on the request\'s span', async (t) => {
  const { receiver, upstream, sidecar } = await tracedSidecar(t, { RATE_LIMITS: 'GET /v2/store/products/catalog 1/1h cache=1h; GET /v2/store/orders/** 1/1h; POST /v2/store/carts 5/1h', RATE_LIMIT_MAX_WAIT_MS: '0' })
  await call(sidecar.proxyUrl, '/v2/store/orders/1', 'o1', `00-${'1'.repeat(32)}-${CALLER_SPAN}-01`)
  t.equal((await call(sidecar.proxyUrl, '/v2/store/orders/2', 'o2', `00-${'2'.repeat(32)}-${CALLER_SPAN}-01`)).status, 429)
  const refused = await serverSpan(t, receiver, (s) => s.traceId === '2'.repeat(32))
  t.match(refused.events.find((e) => e.name === 'quota')?.attributes, { 'quota.verdict': 'refused', 'quota.reason': 'budget' })
  t.equal(refused.attributes['http.response.status_code'], 429)
  t.notOk(receiver.trace('2'.repeat(32)).some((s) => s.kind === CLIENT), 'nothing sent to TI')

  await call(sidecar.proxyUrl, '/v2/store/products/catalog', 'c1', `00-${'3'.repeat(32)}-${CALLER_SPAN}-01`)
  await call(sidecar.proxyUrl, '/v2/store/products/catalog', 'c2', `00-${'4'.repeat(32)}-${CALLER_SPAN}-01`)
  const miss = await serverSpan(t, receiver, (s) => s.traceId === '3'.repeat(32))
  const missEvents = miss.events.filter((e) => e.name === 'cache').map((e) => e.attributes)
  t.match(missEvents, [{ 'cache.result': 'miss' }], 'a stored miss: one cache event, what the caller was served')
  t.notOk(missEvents.some((a) => String(a['cache.status']).includes('too-large')), 'never the label meant for a pass-through')
  const hit = await serverSpan(t, receiver, (s) => s.traceId === '4'.repeat(32))
  t.match(hit.events.find((e) => e.name === 'cache')?.attributes, { 'cache.result': 'hit' })
  t.notOk(receiver.trace('4'.repeat(32)).some((s) => s.kind === CLIENT), 'a hit sends nothing')

  upstream.plan('r', { kind: 'unauthorized', answer: { status: 201, headers: [['Content-Type', 'text/plain']], body: Buffer.from('ok'), framing: 'length' } })
  const res = await request(sidecar.proxyUrl + '/v2/store/carts', { method: 'POST', body: '{}', headers: { [ID_HEADER]: 'r', traceparent: `00-${'5'.repeat(32)}-${CALLER_SPAN}-01` } })
  await res.body.text()
  t.equal(res.statusCode, 201)
  const replayed = await serverSpan(t, receiver, (s) => s.traceId === '5'.repeat(32))
  t.ok(replayed.events.some((e) => e.name === '401 from TI'), 'the 401 held back')
  t.match(replayed.events.find((e) => e.name === 'replay')?.attributes, { 'http.request.resend_count': 1 })
  await eventually(t, 'both sends exported', () => receiver.trace('5'.repeat(32)).filter((s) => s.kind === CLIENT).length === 2)
  const sends = receiver.trace('5'.repeat(32)).filter((s) => s.kind === CLIENT)
  t.same(sends.map((s) => s.attributes['http.response.status_code']).sort(), [201, 401])
  t.not(traceparentAt(upstream, 'r', 0), traceparentAt(upstream, 'r', 1), 'each send its own span')
})

t.test('a wait for the first token: a span linked to the token request\'s, shared by every waiting request', async (t) => {
  const { receiver, sidecar } = await tracedSidecar(t, {}, { start: false })
  const calls = [call(sidecar.proxyUrl, '/v2/store/a', 'w1', `00-${'6'.repeat(32)}-${CALLER_SPAN}-01`), call(sidecar.proxyUrl, '/v2/store/b', 'w2', `00-${'7'.repeat(32)}-${CALLER_SPAN}-01`)]
  t.same((await Promise.all(calls)).map((c) => c.status), [200, 200])
  await eventually(t, 'the waits exported', () => receiver.spans.filter((s) => s.name === 'wait for token').length === 2)
  const token = receiver.spans.find((s) => s.name === 'token request') as Seen
  t.ok(token !== undefined, 'the token request has its span')
  for (const trace of ['6'.repeat(32), '7'.repeat(32)]) {
    const server = await serverSpan(t, receiver, (s) => s.traceId === trace)
    const wait = receiver.trace(trace).find((s) => s.name === 'wait for token') as Seen
    t.equal(wait.parentSpanId, server.spanId, 'the wait is a child of the request')
    t.same(wait.links.map((l) => l.spanId), [token.spanId], 'linked to the one token request')
  }
})

t.test('a shed request: the overload manager\'s decision on its span', async (t) => {
  const { receiver, upstream, sidecar } = await tracedSidecar(t, { MAX_IN_FLIGHT_REQUESTS: '1' })
  upstream.plan('held', { kind: 'hold' })
  const held = call(sidecar.proxyUrl, '/v2/store/x', 'held', `00-${'8'.repeat(32)}-${CALLER_SPAN}-01`)
  await eventually(t, 'the first request at TI', () => upstream.seen('held').length === 1)
  t.equal((await call(sidecar.proxyUrl, '/v2/store/y', 'shed', `00-${'9'.repeat(32)}-${CALLER_SPAN}-01`)).status, 503)
  const shed = await serverSpan(t, receiver, (s) => s.traceId === '9'.repeat(32))
  t.match(shed.events.find((e) => e.name === 'overload')?.attributes, { 'overload.admitted': false, 'overload.reason': 'in_flight' })
  t.equal(shed.attributes['http.response.status_code'], 503)
  t.ok(shed.error)
  upstream.releaseHeld()
  await held
  const admitted = await serverSpan(t, receiver, (s) => s.traceId === '8'.repeat(32))
  t.match(admitted.events.find((e) => e.name === 'overload')?.attributes, { 'overload.admitted': true })
})

t.test('TI resets the connection, or cuts its answer: the send\'s span ends in error, with why', async (t) => {
  const { receiver, upstream, sidecar } = await tracedSidecar(t)
  upstream.plan('reset', { kind: 'reset' })
  t.equal((await call(sidecar.proxyUrl, '/v2/store/products/a', 'reset', `00-${'6'.repeat(32)}-${CALLER_SPAN}-01`)).status, 502)
  await eventually(t, 'the failed send exported', () => receiver.trace('6'.repeat(32)).some((s) => s.kind === CLIENT))
  const failed = receiver.trace('6'.repeat(32)).find((s) => s.kind === CLIENT) as Seen
  t.ok(failed.error, 'the send\'s span has an error status')
  t.match(failed.attributes['error.type'], /^[A-Z_]+$|Error$/, `named by the failure (${String(failed.attributes['error.type'])})`)
  const server = await serverSpan(t, receiver, (s) => s.traceId === '6'.repeat(32))
  t.equal(server.attributes['http.response.status_code'], 502)

  upstream.plan('cut', { kind: 'cut', framing: 'length', sendBytes: 100, how: 'fin' })
  const res = await request(sidecar.proxyUrl + '/v2/store/products/b', { headers: { [ID_HEADER]: 'cut', traceparent: `00-${'7'.repeat(32)}-${CALLER_SPAN}-01` } })
  t.equal(res.statusCode, 200, 'the head was already passed on')
  await t.rejects(res.body.text(), 'the caller sees the answer cut, not a whole one')
  await eventually(t, 'the cut send exported', () => receiver.trace('7'.repeat(32)).some((s) => s.kind === CLIENT))
  const cut = receiver.trace('7'.repeat(32)).find((s) => s.kind === CLIENT) as Seen
  t.ok(cut.error)
  t.equal(cut.attributes['error.type'], 'truncated')
})

t.test('the caller\'s baggage never reaches TI (an outside review\'s find); the trace context does', async (t) => {
  const { upstream, sidecar } = await tracedSidecar(t)
  const res = await request(sidecar.proxyUrl + '/v2/store/products/a', {
    headers: { [ID_HEADER]: 'b', traceparent: `00-${CALLER_TRACE}-${CALLER_SPAN}-01`, baggage: 'enduser.id=jane%40example.com,tenant=acme-internal' }
  })
  await res.body.text()
  const raw = upstream.seen('b')[0]?.rawHeaders ?? []
  const names = raw.filter((_, i) => i % 2 === 0).map((h) => h.toLowerCase())
  t.notOk(names.includes('baggage'), 'no baggage header to TI')
  t.notOk(raw.join('\n').includes('jane'), '... nor its content anywhere')
  t.match(traceparentAt(upstream, 'b'), new RegExp(`^00-${CALLER_TRACE}-[0-9a-f]{16}-01$`), 'TI gets the trace, continued')
})

t.test('an answer too large to store, passed on as it comes: its label is on the span, once', async (t) => {
  const { receiver, upstream, sidecar } = await tracedSidecar(t, { RATE_LIMITS: 'GET /v2/store/products/catalog 5/1h cache=1h', CACHE_ENTRY_MAX_BYTES: '1024', RATE_LIMIT_MAX_WAIT_MS: '0' })
  upstream.plan('big', { kind: 'answer', answer: { status: 200, headers: [['Content-Type', 'application/json']], body: Buffer.from(JSON.stringify({ items: 'x'.repeat(4096) })), framing: 'chunked' } })
  const got = await call(sidecar.proxyUrl, '/v2/store/products/catalog', 'big', `00-${'6'.repeat(32)}-${CALLER_SPAN}-01`)
  t.match(got.headers['cache-status'], /detail=too-large/)
  const span = await serverSpan(t, receiver, (s) => s.traceId === '6'.repeat(32))
  t.same(span.events.filter((e) => e.name === 'cache').map((e) => e.attributes['cache.status']), [got.headers['cache-status']])
})

t.test('OTEL_SERVICE_NAME wins over a service.name in OTEL_RESOURCE_ATTRIBUTES; without it, that one', async (t) => {
  const named = await tracedSidecar(t, { OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-attributes,team=shop' })
  await call(named.sidecar.proxyUrl, '/v2/store/x', 'n')
  t.match((await serverSpan(t, named.receiver, () => true)).resource, { 'service.name': 'shop-sidecar', team: 'shop' })
  const unnamed = await tracedSidecar(t, { OTEL_SERVICE_NAME: '', OTEL_RESOURCE_ATTRIBUTES: 'service.name=from-attributes' })
  await call(unnamed.sidecar.proxyUrl, '/v2/store/x', 'u')
  t.equal((await serverSpan(t, unnamed.receiver, () => true)).resource['service.name'], 'from-attributes')
})
