import t from 'tap'
import { request } from 'undici'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { metricValue } from '../helpers/metrics.js'
import { scrapeSettled, seriesKey } from '../helpers/metrics-scrape.js'
import { startStalledUpstream, startUpstream } from '../helpers/upstream.js'

// How each exchange on the proxy port is accounted for: the in-flight gauge while it
// runs, its duration (in seconds, from arrival to the close of its answer) once it
// closes, and, with ACCESS_LOG on, one log line whose duration is the same one.

const IN_FLIGHT = 'store_auth_proxy_requests_in_flight'
const DURATION = 'store_auth_proxy_request_duration_seconds'

t.test('an exchange is in flight while its answer is awaited, and no longer once it closes', async (t) => {
  const upstream = await startStalledUpstream(t)
  const { proxyUrl, adminUrl } = await startSidecar(t, upstream.url)
  const answer = request(proxyUrl + '/held')
  await eventually(t, 'the request held by the upstream', () => upstream.received.length === 1)
  t.equal(await metricValue(adminUrl, IN_FLIGHT), 1, 'one in flight')
  upstream.releaseAll()
  const res = await answer
  t.equal(await res.body.text(), 'done')
  await scrapeSettled(adminUrl)
  t.equal(await metricValue(adminUrl, IN_FLIGHT), 0, 'none in flight after it closed')
})

t.test('the access log line and the duration histogram give the same duration, in milliseconds and in seconds', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl, adminUrl, logs } = await startSidecar(t, upstream.url, { ACCESS_LOG: 'true' })
  // The sidecar runs in this process: its clock is this one, and its exchange lies within these two readings.
  const before = performance.now()
  const res = await request(proxyUrl + '/timed?x=1', { method: 'GET' })
  await res.body.dump()
  const samples = await scrapeSettled(adminUrl)
  const around = performance.now() - before
  t.equal(samples.get(seriesKey(`${DURATION}_count`, { status_class: '2xx' })), 1)
  const seconds = samples.get(seriesKey(`${DURATION}_sum`, { status_class: '2xx' })) ?? -1
  t.ok(seconds >= 0 && seconds * 1000 <= around, `a duration in seconds (${seconds}) within the ${around} ms measured around it`)
  const lines = logs.entries().filter((e) => e.msg === 'request')
  t.equal(lines.length, 1, 'one access log line')
  t.match(lines[0], { method: 'GET', url: '/timed?x=1', statusCode: 200, outcome: 'completed' })
  const durationMs = lines[0]?.durationMs as number
  t.ok(Math.abs(durationMs - seconds * 1000) <= 0.05 + 1e-9, `logged ${durationMs} ms, measured ${seconds} s`)
  t.ok(Math.abs(durationMs * 10 - Math.round(durationMs * 10)) < 1e-6, 'rounded to a tenth of a millisecond')
})

t.test('with ACCESS_LOG off (the default) no exchange is logged', async (t) => {
  const upstream = await startUpstream(t)
  const { proxyUrl, adminUrl, logs } = await startSidecar(t, upstream.url)
  const res = await request(proxyUrl + '/quiet')
  await res.body.dump()
  await scrapeSettled(adminUrl)
  t.same(logs.entries().filter((e) => e.msg === 'request'), [])
})
