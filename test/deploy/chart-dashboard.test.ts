// The chart's Grafana dashboard (helm/store-auth-proxy/dashboards/store-auth-proxy.json)
// and alerts (templates/prometheusrule.yaml): valid dashboard JSON with the panels ops
// need, and every metric and label their queries name is one a running sidecar exports
// (scraped from /metrics of a sidecar built in-process with the process metrics on, and
// with a quota rule, a real Redis and an upstream that rate-limits one path, and a cached
// rule whose answers are stored, hit, refused storage and evicted).
import { readdirSync, readFileSync } from 'node:fs'
import { createServer, request as httpRequest, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo } from 'node:net'
import { join } from 'node:path'
import t from 'tap'
import { request } from 'undici'
import { build, startStandIn } from '../helpers/build.js'
import { startRedis } from '../helpers/redis.js'
import { CHART, one, render, type JsonObject } from './chart-helm.js'
import { MONITORING } from './chart-expect.js'

t.setTimeout(120_000)

const DASHBOARD = JSON.parse(readFileSync(join(CHART, 'dashboards/store-auth-proxy.json'), 'utf8')) as JsonObject
interface Panel { id: number, type: string, title: string, gridPos: JsonObject, datasource: JsonObject, targets: Array<{ expr: string, refId: string }> }
const PANELS = DASHBOARD.panels as unknown as Panel[]

/**
 * What the dashboard and the alerts may name: the sidecar's metrics and their labels, as
 * the team fixed them (prompts/common.md). Target labels (instance, job) come from
 * Prometheus, `le` from histograms.
 */
const EXPORTED: Record<string, string[]> = {
  store_auth_proxy_token_requests_total: ['outcome'],
  store_auth_proxy_token_request_duration_seconds_bucket: ['le'],
  store_auth_proxy_token_expiry_timestamp_seconds: [],
  store_auth_proxy_requests_total: ['method', 'status_class', 'outcome'],
  store_auth_proxy_request_duration_seconds_bucket: ['le', 'status_class'],
  store_auth_proxy_requests_in_flight: [],
  store_auth_proxy_errors_total: ['code'],
  store_auth_proxy_upstream_queued_requests: [],
  store_auth_proxy_build_info: ['version', 'revision', 'node'],
  store_auth_proxy_rate_limited_total: ['rule', 'reason', 'action'],
  store_auth_proxy_rate_limit_upstream_answers_total: ['rule'],
  store_auth_proxy_rate_limit_cooldown_until_seconds: ['rule'],
  store_auth_proxy_rate_limit_backend: ['backend'],
  store_auth_proxy_rate_limit_redis_up: [],
  store_auth_proxy_rate_limit_redis_fallbacks_total: [],
  store_auth_proxy_rate_limit_fleet_present: [],
  store_auth_proxy_rate_limit_fleet_declared: [],
  store_auth_proxy_rate_limit_remaining: ['rule', 'limit'],
  store_auth_proxy_rate_limit_quota: ['rule', 'limit'],
  store_auth_proxy_idempotency_outcomes_unknown_total: ['rule'],
  store_auth_proxy_cache_requests_total: ['rule', 'result'],
  store_auth_proxy_cache_stores_total: ['rule'],
  store_auth_proxy_cache_not_stored_total: ['rule', 'reason'],
  store_auth_proxy_cache_evictions_total: ['rule'],
  store_auth_proxy_cache_bytes: [],
  store_auth_proxy_cache_redis_errors_total: [],
  store_auth_proxy_overload_shed_total: ['reason'],
  store_auth_proxy_overload_shedding: [],
  store_auth_proxy_memory_live_bytes: [],
  store_auth_proxy_memory_private_bytes: [],
  store_auth_proxy_memory_limit_bytes: [],
  process_resident_memory_bytes: [],
  process_cpu_seconds_total: [],
  nodejs_heap_size_used_bytes: [],
  nodejs_external_memory_bytes: [],
  nodejs_eventloop_lag_p99_seconds: []
}
const TARGET_LABELS = new Set(['instance', 'job'])

const PROMQL_WORDS = new Set(['by', 'without', 'on', 'ignoring', 'group_left', 'group_right', 'and', 'or', 'unless', 'bool', 'offset', 'inf', 'nan'])

/** The metric names and label names a PromQL expression uses. */
function namesIn (expr: string): { metrics: string[], labels: string[] } {
  const labels: string[] = []
  let rest = expr.replace(/"(?:[^"\\]|\\.)*"/g, '""') // string literals
  rest = rest.replace(/\{([^}]*)\}/g, (_m, inner: string) => {
    for (const m of inner.matchAll(/([a-zA-Z_]\w*)\s*(=~|!~|!=|=)/g)) labels.push(m[1] as string)
    return ' '
  })
  rest = rest.replace(/\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)/g, (_m, inner: string) => {
    labels.push(...inner.split(',').map((l) => l.trim()).filter((l) => l !== ''))
    return ' '
  })
  rest = rest.replace(/\[[^\]]*\]/g, ' ') // range selectors
  const metrics = [...rest.matchAll(/([a-zA-Z_:][\w:]*)(\s*\()?/g)]
    .filter((m) => m[2] === undefined && !PROMQL_WORDS.has((m[1] as string).toLowerCase()) && !/^\d/.test(m[1] as string))
    .map((m) => m[1] as string)
  return { metrics, labels }
}

/** Every query of the dashboard (panels and template variables) and of the alerts. */
async function queries (): Promise<Array<{ where: string, expr: string }>> {
  const out = PANELS.flatMap((p) => p.targets.map((target) => ({ where: `panel "${p.title}" ${target.refId}`, expr: target.expr })))
  for (const v of (DASHBOARD.templating as { list: Array<{ name: string, definition?: string }> }).list) {
    const m = /^label_values\((.*),\s*\w+\)$/.exec(v.definition ?? '')
    if (m !== null) out.push({ where: `variable ${v.name}`, expr: m[1] as string })
  }
  const objects = await render(['r', CHART, '--set', 'credentials.existingSecret=c', '--set', 'metrics.prometheusRule.enabled=true', ...MONITORING])
  for (const group of (one(objects, 'PrometheusRule').spec as JsonObject).groups as JsonObject[]) {
    for (const rule of group.rules as JsonObject[]) out.push({ where: `alert ${String(rule.alert)}`, expr: String(rule.expr) })
  }
  return out
}

/** Forwards one request to `base` as it came, and its answer back. */
function createProxyTo (base: string, req: IncomingMessage, res: ServerResponse): ReturnType<typeof httpRequest> {
  return httpRequest(new URL(req.url ?? '/', base), { method: req.method, headers: req.headers }, (answer) => {
    res.writeHead(answer.statusCode ?? 502, answer.headers)
    answer.pipe(res)
  })
}

t.test('the PromQL name extraction finds metrics and labels, and nothing else', async (t) => {
  t.same(namesIn('sum by (code) (rate(store_auth_proxy_errors_total{instance=~"$instance", code!="x"}[$__rate_interval])) / on (job) up'),
    { metrics: ['store_auth_proxy_errors_total', 'up'], labels: ['instance', 'code', 'code', 'job'] })
  t.same(namesIn('histogram_quantile(0.95, sum by (le) (rate(a_bucket[5m]))) > 0.5 and b - time() < 180'),
    { metrics: ['a_bucket', 'b'], labels: ['le'] })
})

t.test('the dashboard is Grafana dashboard JSON with the panels ops need', async (t) => {
  t.match(DASHBOARD, { uid: 'store-auth-proxy', title: String, schemaVersion: Number, panels: Array })
  t.equal(new Set(PANELS.map((p) => p.id)).size, PANELS.length, 'panel ids are unique')
  for (const p of PANELS) {
    t.match(p, { type: /^(timeseries|stat)$/, title: String, gridPos: { h: Number, w: Number, x: Number, y: Number } }, p.title)
    // eslint-disable-next-line no-template-curly-in-string -- Grafana's variable syntax, not a JS template
    t.equal(p.datasource.uid, '${datasource}', `${p.title}: uses the data source variable`)
    t.ok(p.targets.length > 0 && p.targets.every((target) => target.expr.includes('instance=~"$instance"')), `${p.title}: queries filter on $instance`)
  }
  const exprs = PANELS.flatMap((p) => p.targets.map((target) => target.expr)).join('\n')
  const needs: Array<[string, RegExp]> = [
    ['token expiry countdown', /store_auth_proxy_token_expiry_timestamp_seconds\{[^}]*\} > 0\) - time\(\)/],
    ['token requests by outcome', /sum by \(outcome\) \(increase\(store_auth_proxy_token_requests_total/],
    ['proxied request rate by status class', /sum by \(status_class\) \(rate\(store_auth_proxy_requests_total/],
    ['proxied latency by status class', /histogram_quantile\(0\.99, sum by \(le, status_class\) \(rate\(store_auth_proxy_request_duration_seconds_bucket/],
    ['in-flight requests', /store_auth_proxy_requests_in_flight/],
    ['503s by cause', /sum by \(code\) \(rate\(store_auth_proxy_errors_total/],
    ['memory', /process_resident_memory_bytes/],
    ['CPU', /rate\(process_cpu_seconds_total/],
    ['quota refusals and delays by rule, reason and action', /sum by \(rule, reason, action\) \(rate\(store_auth_proxy_rate_limited_total/],
    ['rate-limit answers from TI by rule', /sum by \(rule\) \(increase\(store_auth_proxy_rate_limit_upstream_answers_total/],
    ['cool-downs left by rule', /max by \(rule\) \(store_auth_proxy_rate_limit_cooldown_until_seconds\{[^}]*\} > 0\) - time\(\)/],
    ['the quota backend', /sum by \(backend\) \(store_auth_proxy_rate_limit_backend/],
    ['Redis health', /store_auth_proxy_rate_limit_redis_up/],
    ['fallbacks to memory', /increase\(store_auth_proxy_rate_limit_redis_fallbacks_total/],
    ['cache answers by rule and result (hit, coalesced, stale, miss)', /sum by \(rule, result\) \(rate\(store_auth_proxy_cache_requests_total/],
    ['cache stores, answers not stored by reason, evictions', /store_auth_proxy_cache_stores_total[^]*sum by \(rule, reason\) \(increase\(store_auth_proxy_cache_not_stored_total[^]*store_auth_proxy_cache_evictions_total/],
    ['cache bytes held', /store_auth_proxy_cache_bytes/]
  ]
  for (const [what, pattern] of needs) t.match(exprs, pattern, what)
})

t.test('every query names only the sidecar\'s metrics and their labels', async (t) => {
  const all = await queries()
  t.ok(all.length > 20, `${all.length} queries`)
  for (const { where, expr } of all) {
    const { metrics, labels } = namesIn(expr)
    t.ok(metrics.length > 0, `${where}: names a metric`)
    for (const m of metrics) t.ok(m in EXPORTED, `${where}: ${m} is a sidecar metric`)
    for (const l of labels.filter((l) => !TARGET_LABELS.has(l))) {
      t.ok(metrics.some((m) => EXPORTED[m]?.includes(l)), `${where}: label ${l} is one of ${metrics.join(', ')}`)
    }
  }
  // Every listed name is used somewhere, so the list cannot drift into a blanket allowance.
  const used = new Set(all.flatMap(({ expr }) => namesIn(expr).metrics))
  for (const m of Object.keys(EXPORTED)) t.ok(used.has(m), `${m} is used by a query`)
})

/**
 * Counted only when their event happens (an order's outcome left unknown): the running sidecar
 * below has no series of them, so they are checked as declared in src/metrics/ instead.
 */
const AFTER_AN_EVENT = new Set(['store_auth_proxy_idempotency_outcomes_unknown_total'])

t.test('a metric counted only after an event is declared with its labels', async (t) => {
  const parts = join(import.meta.dirname, '../../src/metrics')
  const source = readdirSync(parts).map((file) => readFileSync(join(parts, file), 'utf8')).join('\n')
  for (const metric of AFTER_AN_EVENT) {
    const at = source.indexOf('METRIC_PREFIX}' + metric.replace('store_auth_proxy_', '') + '`')
    t.ok(at >= 0, `${metric} is declared`)
    const labels = /labelNames: \[([^\]]*)\]/.exec(source.slice(at))?.[1] ?? ''
    for (const l of EXPORTED[metric] ?? []) t.ok(labels.includes(`'${l}'`), `${metric} has label ${l}`)
  }
})

t.test('a running sidecar exports every metric and label the queries name', async (t) => {
  const standIn = await startStandIn(t)
  // The quota guard's series: a rule, a real Redis, and an upstream that rate-limits one path.
  const redis = await startRedis(t)
  const upstream = createServer((req, res) => {
    if (req.url === '/v2/store/products/catalog') {
      res.writeHead(429, { 'retry-after': '60', 'content-type': 'application/json' }).end('{"fault":{}}')
    } else if (req.url === '/v2/store/products/personal') {
      res.writeHead(200, { 'cache-control': 'private', 'content-type': 'application/json' }).end('{}')
    } else if (req.url?.startsWith('/v2/store/products/large-') === true) {
      // Two of these fill the 64 KiB cache: the second evicts the first.
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ filler: 'x'.repeat(40_000) }))
    } else {
      req.pipe(createProxyTo(standIn.url, req, res))
    }
  })
  await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
  t.teardown(() => upstream.close())
  const upstreamUrl = `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`
  const { proxyUrl, adminUrl } = await build(t, {
    AUTH_URL: standIn.url,
    UPSTREAM_URL: upstreamUrl,
    RATE_LIMITS: 'GET /v2/store/products/catalog 1/4h; GET /v2/store/products/* 100/1s cache=1m stale=1h',
    RATE_LIMIT_REDIS_URL: redis.url,
    CACHE_MAX_BYTES: '65536',
    CACHE_ENTRY_MAX_BYTES: '65536'
    // A Redis tally younger than the grace holds budgets for a few seconds (docs/quota-guard.md): none here.
  }, { defaultMetrics: true, quotaTiming: { freshGraceMs: 0 } })
  // Traffic that creates the labelled series: a proxied answer, and one the sidecar makes itself.
  await (await request(proxyUrl + '/v2/store/products/LM358BIDR')).body.dump()
  await (await request(proxyUrl + '/v2/store/products', { method: 'TRACE' })).body.dump()
  // A rate-limit answer from the upstream, then a caller refused during its cool-down.
  t.equal((await request(proxyUrl + '/v2/store/products/catalog')).statusCode, 429)
  const refused = await request(proxyUrl + '/v2/store/products/catalog')
  t.match(await refused.body.json(), { error: 'UPSTREAM_RATE_LIMITED' })
  // The read cache's series: the answer stored above asked for again, one TI marks private,
  // an eviction.
  const cacheStatus = async (path: string): Promise<string> => {
    const answer = await request(proxyUrl + path)
    await answer.body.dump()
    return String(answer.headers['cache-status'])
  }
  t.match(await cacheStatus('/v2/store/products/LM358BIDR'), /; hit/)
  t.match(await cacheStatus('/v2/store/products/personal'), /detail=private/)
  t.match(await cacheStatus('/v2/store/products/large-1'), /stored/)
  t.match(await cacheStatus('/v2/store/products/large-2'), /stored/)
  const text = await (await request(adminUrl + '/metrics')).body.text()
  const scraped = new Map<string, Set<string>>()
  for (const line of text.split('\n').filter((l) => l !== '' && !l.startsWith('#'))) {
    const m = /^([a-zA-Z_:][\w:]*)(?:\{([^}]*)\})?/.exec(line)
    if (m === null) continue
    const labels = scraped.get(m[1] as string) ?? new Set<string>()
    for (const l of (m[2] ?? '').matchAll(/([a-zA-Z_]\w*)="/g)) labels.add(l[1] as string)
    scraped.set(m[1] as string, labels)
  }
  t.ok(scraped.size > 10, `scraped ${scraped.size} metric names`)
  for (const [metric, labels] of Object.entries(EXPORTED).filter(([m]) => !AFTER_AN_EVENT.has(m))) {
    t.ok(scraped.has(metric), `${metric} is exported`)
    for (const l of labels) t.ok(scraped.get(metric)?.has(l) === true, `${metric} has label ${l}`)
  }
})
