// What a sidecar gives back after a burst: private memory (RssAnon) idle, right after a 5 s
// `wrk -c32` burst of small GETs, then every 2.5 s for 30 s. Runs a built entry point with the
// image's node flag and glibc tunables against a stand-in that is both the OAuth API and the
// store API. `node bench/probe/burst.ts [path/to/main.js ...]` (default dist/main.js); wrk on PATH.
import { spawn } from 'node:child_process'
import { readFileSync } from 'node:fs'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { setTimeout as sleep } from 'node:timers/promises'

const TUNABLES = 'glibc.malloc.mmap_threshold=32768:glibc.malloc.trim_threshold=131072:glibc.malloc.arena_max=2'
const product = JSON.stringify({ sku: 'LM358', price: 1.23, qty: 42, pad: 'x'.repeat(200) })
const token = JSON.stringify({ access_token: 'x'.repeat(40), token_type: 'Bearer', expires_in: 3600 })
const standIn = createServer((req, res) => {
  res.setHeader('content-type', 'application/json')
  res.end(req.url?.startsWith('/v2/store') === true ? product : token)
})
await new Promise<void>((resolve) => standIn.listen(0, '127.0.0.1', resolve))
const url = `http://127.0.0.1:${(standIn.address() as AddressInfo).port}`

async function burst (main: string): Promise<string> {
  const child = spawn(process.execPath, ['--max-semi-space-size=4', '--expose-gc', main, 'serve'], {
    env: { PATH: process.env.PATH, GLIBC_TUNABLES: TUNABLES, AUTH_URL: url, UPSTREAM_URL: url, CLIENT_ID: 'id', CLIENT_SECRET: 'secret', PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1' }
  })
  let out = ''
  child.stdout.setEncoding('utf8').on('data', (d: string) => { out += d })
  const listening = /"listener":"proxy","msg":"Server listening at (http:\/\/[\d.:]+)"/
  while (!/access token acquired/.test(out) || !listening.test(out)) await sleep(50)
  const proxy = listening.exec(out)?.[1] ?? ''
  const privateMiB = (): string => (Number(/RssAnon:\s+(\d+)/.exec(readFileSync(`/proc/${child.pid}/status`, 'utf8'))?.[1]) / 1024).toFixed(1)
  const row = [main]
  await sleep(2000)
  row.push(`idle ${privateMiB()}`)
  // Spawned, not run synchronously: the stand-in answers from this process's event loop.
  const rate = await new Promise<string>((resolve) => {
    const wrk = spawn('wrk', ['-t1', '-c32', '-d5s', `${proxy}/v2/store/products/LM358?currency=USD`])
    let text = ''
    wrk.stdout.setEncoding('utf8').on('data', (d: string) => { text += d })
    wrk.once('exit', () => { resolve(/Requests\/sec:\s+([\d.]+)/.exec(text)?.[1] ?? '?') })
  })
  row.push(`burst ${rate} req/s`, `after ${privateMiB()}`)
  for (let i = 1; i <= 12; i++) {
    await sleep(2500)
    row.push(`+${i * 2.5} s ${privateMiB()}`)
  }
  child.kill()
  return row.join(', ')
}

for (const main of process.argv.length > 2 ? process.argv.slice(2) : ['dist/main.js']) console.log(await burst(main))
standIn.close()
