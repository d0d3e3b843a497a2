// A collector that is down, refuses or never answers changes no answer: the spans wait in a
// bounded queue and what does not fit, or fails to export, is dropped and counted.
import t from 'tap'
import { request } from 'undici'
import { build, startStandIn } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { scrapeSettled, seriesKey } from '../helpers/metrics-scrape.js'
import { ID_HEADER, startRecordingUpstream } from '../helpers/recording-upstream.js'
import { startReceiver, type Mode } from './receiver.js'

t.setTimeout(120_000)

const dropped = (reason: string): string => seriesKey('store_auth_proxy_trace_spans_dropped_total', { reason })

for (const mode of ['down', 'refuse', 'hang'] as Array<Mode | 'down'>) {
  t.test(`a collector that ${mode === 'down' ? 'is down' : mode === 'refuse' ? 'refuses (503)' : 'never answers'}: every answer as without tracing, the spans dropped and counted`, async (t) => {
    const receiver = mode === 'down' ? { url: 'http://127.0.0.1:9', requests: [] } : await startReceiver(t, mode)
    const upstream = await startRecordingUpstream(t)
    const standIn = await startStandIn(t)
    const sidecar = await build(t, {
      AUTH_URL: standIn.url,
      UPSTREAM_URL: upstream.url,
      OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: `${receiver.url}/v1/traces`,
      OTEL_BSP_SCHEDULE_DELAY: '5',
      OTEL_BSP_MAX_QUEUE_SIZE: '4',
      OTEL_BSP_MAX_EXPORT_BATCH_SIZE: '2',
      // Hanging: one export waits past the test; otherwise failures come back within a second.
      OTEL_EXPORTER_OTLP_TIMEOUT: mode === 'hang' ? '60000' : '1000'
    })
    const answers = await Promise.all(Array.from({ length: 30 }, async (_, i) => {
      const res = await request(`${sidecar.proxyUrl}/v2/store/p/${i}`, { headers: { [ID_HEADER]: `r${i}` } })
      return { status: res.statusCode, body: await res.body.text() }
    }))
    t.same([...new Set(answers.map((a) => `${a.status} ${a.body}`))], ['200 ok'], 'every caller got TI\'s answer')
    t.equal(upstream.received.length, 30)
    await eventually(t, 'spans dropped, counted', async () => ((await scrapeSettled(sidecar.adminUrl)).get(dropped(mode === 'hang' ? 'queue_full' : 'export_failed')) ?? 0) > 0, 30_000)
    if (mode !== 'down') t.ok(receiver.requests.every((r) => r.contentType === 'application/x-protobuf'), 'http/protobuf by default')
  })
}
