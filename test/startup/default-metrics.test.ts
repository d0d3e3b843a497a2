// prom-client's default collectors are registered at the first scrape, not at start
// (src/metrics/prom.ts): a scrape shows them under their standard names, every scrape after it
// too, and a registry built without them never gets them.
import t from 'tap'
import { createMetrics } from '../../src/metrics.js'

const DEFAULTS = ['process_cpu_seconds_total', 'process_resident_memory_bytes', 'process_start_time_seconds', 'nodejs_eventloop_lag_seconds', 'nodejs_heap_size_used_bytes', 'nodejs_version_info']

t.test('registered at the first scrape, under their standard names, and once', async (t) => {
  const { registry } = createMetrics()
  t.equal(registry.getSingleMetric('process_cpu_seconds_total'), undefined, 'not before a scrape')
  const first = await registry.metrics()
  for (const name of DEFAULTS) t.match(first, new RegExp(`^${name}[ {]`, 'm'), name)
  t.match(first, /^store_auth_proxy_build_info\{/m, 'beside the sidecar\'s own')
  // A second registration would throw "already registered".
  const second = await registry.metrics()
  for (const name of DEFAULTS) t.match(second, new RegExp(`^${name}[ {]`, 'm'), `${name} again`)
  t.equal(second.match(/^# HELP process_cpu_seconds_total /gm)?.length, 1, 'one of each')
})

t.test('off (tests, where many apps share one process): never registered', async (t) => {
  const { registry } = createMetrics({ defaultMetrics: false })
  const text = await registry.metrics()
  t.notMatch(text, /^(process|nodejs)_/m)
  t.match(text, /^store_auth_proxy_requests_in_flight /m)
})
