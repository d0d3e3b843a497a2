// What a read-cache entry costs in live memory (V8's heap in use plus external: what the
// overload manager watches), against what the cache counts it for (entries.ts entrySize). The
// sidecar is built in this process (src/app.ts) in front of an upstream that answers every
// path 200 with a body of --body-bytes and its usual headers; N distinct GETs are stored;
// live memory is read after full collections before and after them.
//
//   node --expose-gc --import ./test/helpers/ts-resolve.mjs bench/probe/cache-entries.ts [--entries 20000] [--body-bytes 45]
//
// Runs from its sources only (it imports src/; bench/tsconfig.json leaves it out).
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'
import pino from 'pino'
import { Pool } from 'undici'
import { buildApp } from '../../src/app.js'
import { loadConfig } from '../../src/config/load.js'
import { DEMO_CLIENT_ID, DEMO_CLIENT_SECRET } from '../../src/demo/config.js'
import { createStandIn } from '../../src/demo/stand-in.js'

const { values } = parseArgs({ options: { entries: { type: 'string', default: '20000' }, 'body-bytes': { type: 'string', default: '45' }, headers: { type: 'string', default: '0' }, 'path-bytes': { type: 'string', default: '0' } } })
const entries = Number(values.entries)
const bodyBytes = Number(values['body-bytes'])
/** Header fields beside content-type (and Node's date, connection, keep-alive, content-length), each of a 40-byte value. */
const extraHeaders = Object.fromEntries(Array.from({ length: Number(values.headers) }, (_, i) => [`x-extra-${i}`, 'v'.repeat(40)]))
const pathPad = 'p'.repeat(Number(values['path-bytes']))
const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) throw new Error('run with --expose-gc')

async function live (): Promise<number> {
  for (let i = 0; i < 3; i++) {
    gc?.()
    await new Promise((resolve) => setTimeout(resolve, 50))
  }
  const { heapUsed, external } = process.memoryUsage()
  return heapUsed + external
}

const body = Buffer.alloc(bodyBytes, 'x')
const upstream = createServer((req, res) => { req.resume(); res.writeHead(200, { 'content-type': 'application/json', ...extraHeaders }).end(body) })
await new Promise<void>((resolve) => upstream.listen(0, '127.0.0.1', resolve))
const standIn = createStandIn({ clientId: DEMO_CLIENT_ID, clientSecret: DEMO_CLIENT_SECRET })
await standIn.app.listen({ host: '127.0.0.1', port: 0 })
const config = loadConfig({
  AUTH_URL: `http://127.0.0.1:${(standIn.app.server.address() as AddressInfo).port}`,
  UPSTREAM_URL: `http://127.0.0.1:${(upstream.address() as AddressInfo).port}`,
  CLIENT_ID: DEMO_CLIENT_ID,
  CLIENT_SECRET: DEMO_CLIENT_SECRET,
  PORT: '0',
  ADMIN_PORT: '0',
  ACCESS_LOG: 'false',
  MEMORY_LIMIT_BYTES: '0',
  CACHE_MAX_BYTES: String(1024 ** 3),
  RATE_LIMITS: 'GET /** 1000000/1s cache=1h'
})
const app = await buildApp(config, { log: pino({ level: 'silent' }), defaultMetrics: false })
await app.proxy.listen({ host: '127.0.0.1', port: 0 })
await app.start()
const pool = new Pool(`http://127.0.0.1:${(app.proxy.server.address() as AddressInfo).port}`, { connections: 16 })
const counted = async (): Promise<number> => Number(/cache_bytes (\d+)/.exec(await app.metrics.registry.metrics())?.[1] ?? NaN)

async function fill (from: number, to: number): Promise<void> {
  let next = from
  await Promise.all(Array.from({ length: 16 }, async () => {
    while (next < to) {
      const res = await pool.request({ method: 'GET', path: `/v2/store/products/${pathPad}part-${next++}` })
      await res.body.dump()
      if (res.statusCode !== 200) throw new Error(`status ${res.statusCode}`)
    }
  }))
}

// Warm: the first requests load code and grow the pools.
await fill(0, 1000)
const [liveBefore, countedBefore] = [await live(), await counted()]
await fill(1000, 1000 + entries)
const [liveAfter, countedAfter] = [await live(), await counted()]
const perEntry = (liveAfter - liveBefore) / entries
const countedPerEntry = (countedAfter - countedBefore) / entries
process.stdout.write(JSON.stringify({
  node: process.version, liveBeforeMiB: Number((liveBefore / 2 ** 20).toFixed(1)), entries, bodyBytes, headers: Number(values.headers), pathBytes: pathPad.length, liveBytesPerEntry: Math.round(perEntry), countedBytesPerEntry: Math.round(countedPerEntry), ratio: Number((perEntry / countedPerEntry).toFixed(2))
}) + '\n')
await pool.close()
await app.close()
await standIn.app.close()
upstream.close()
