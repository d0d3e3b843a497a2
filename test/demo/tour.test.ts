// `npm run demo` shows what the sidecar is for: its tour's commands, run exactly as printed
// against the running demo, show what each step says to look for.
import { execFile } from 'node:child_process'
import { promisify } from 'node:util'
import t from 'tap'
import { DEMO_RATE_LIMITS, demoTour, formatTour } from '../../src/demo/tour.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'
import { CURL, skipUnless } from '../helpers/tools.js'

const shell = async (command: string): Promise<string> => (await promisify(execFile)('sh', ['-c', command], { maxBuffer: 16 * 1024 * 1024 })).stdout

const URLS = { proxy: 'http://localhost:18080', admin: 'http://localhost:19090', standIn: 'http://127.0.0.1:18081' }

t.test('the printed tour: the budgets, then each step numbered, its command after "$ " and what to look for', async (t) => {
  const text = formatTour(URLS)
  t.match(text, `the sidecar on ${URLS.proxy}`)
  t.match(text, `The budgets: ${DEMO_RATE_LIMITS}`)
  const steps = demoTour(URLS)
  t.equal(steps.length, 6)
  steps.forEach((step, i) => { t.match(text, `  ${i + 1}. ${step.what}.\n       $ ${step.command}\n       Look for: ${step.lookFor}.\n`) })
  t.match(steps.map((s) => s.command), [new RegExp(`^curl .*${URLS.proxy}/v2/store/products/catalog$`), /catalog$/, /LM358BIDR/, /LM358BIDR/, `${URLS.admin}/status`, URLS.standIn])
  t.match(text, /Ctrl-C stops it\.\n/)
})

t.test('the tour: the catalog fetched then a hit, a product within budget then refused, /status, the API without a token', { skip: SKIP_UNDER_MUTATION || skipUnless(CURL) }, async (t) => {
  const demo = runMain(t, ['demo'], { PORT: '0', ADMIN_PORT: '0', STAND_IN_PORT: '0' })
  await demo.waitFor(/Ctrl-C stops it\.\n/, 30_000)
  const printed = demo.stdout().slice(demo.stdout().indexOf('store-auth-proxy demo:'))
  const steps = [...printed.matchAll(/^ {2}\d\. (.*)\n {7}\$ (.*)\n {7}Look for: (.*)\n/gm)]
    .map(([, what, command, lookFor]) => ({ what: what ?? '', command: command ?? '', lookFor: lookFor ?? '' }))
  t.equal(steps.length, 6, printed)
  t.match(printed, DEMO_RATE_LIMITS, 'the budgets are shown')

  const [catalog, again, product, refused, status, direct] = steps
  const fetched = await shell(catalog?.command ?? '')
  t.match(fetched, /^HTTP\/1\.1 200 OK\r$/m)
  t.match(fetched, /^cache-status: store-auth-proxy; fwd=miss; fwd-status=200; stored; ttl=\d+\r$/m, catalog?.lookFor ?? '')
  t.match(catalog?.lookFor ?? '', 'Cache-Status: store-auth-proxy; fwd=miss; fwd-status=200; stored')

  const hit = await shell(again?.command ?? '')
  t.match(hit, /^cache-status: store-auth-proxy; hit; ttl=\d+\r$/m, again?.lookFor ?? '')
  t.match(hit, /^age: \d+\r$/m, 'Age')
  t.match(again?.lookFor ?? '', /Cache-Status: store-auth-proxy; hit.*Age/)

  const within = await shell(product?.command ?? '')
  t.match(within, /^HTTP\/1\.1 200 OK\r$/m, product?.lookFor ?? '')
  t.match(within, /"tiPartNumber":"LM358BIDR".*"pricing":\[\{"currency":"USD"/)

  const past = await shell(refused?.command ?? '')
  t.match(past, /^HTTP\/1\.1 429 Too Many Requests\r$/m, refused?.lookFor ?? '')
  const retryAfter = Number(/^retry-after: (\d+)\r$/m.exec(past)?.[1])
  t.ok(retryAfter > 0 && retryAfter <= 60, `Retry-After: ${retryAfter} s, within the rule's minute`)
  t.match(past, /"error":"UPSTREAM_RATE_LIMITED","message":"the budget of rule GET \/v2\/store\/products\/\* is spent/)
  t.equal(refused?.command, product?.command, 'the same call as the one within budget')

  const document = JSON.parse(await shell(status?.command ?? '')) as {
    rateLimits: { rules: Array<{ rule: string, limits: string[] }> }, cache: { entries: Array<{ path: string, ageSeconds: number }> }
  }
  t.match(document.rateLimits.rules, [{ rule: 'GET /v2/store/products/catalog', limits: ['1/4h'] }, { rule: 'GET /v2/store/products/*', limits: ['1/1m'] }], status?.lookFor ?? '')
  t.match(document.cache.entries, [{ path: '/v2/store/products/catalog', ageSeconds: Number }])

  const noToken = await shell(direct?.command ?? '')
  t.match(noToken, /^HTTP\/1\.1 401 Unauthorized\r$/m, direct?.lookFor ?? '')
  t.match(noToken, '"faultstring":"Invalid access token"', 'a missing token is not called expired')

  demo.child.kill('SIGINT')
  t.equal(await demo.exited, 0)
})
