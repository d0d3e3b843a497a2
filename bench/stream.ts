// Streams one large body through a target, in its own process: an upload (POST
// /upload with Content-Length, written in 64 KiB chunks with backpressure) or a
// download (GET /download?bytes=N, read and dropped). Checks that every byte
// arrived and prints one JSON line: {"bytes":N,"seconds":s,"ok":true}.
//
//   node dist/bench/stream.js '{"base":"http://127.0.0.1:8080","direction":"upload","bytes":104857600,"headers":{}}'
import { request, type IncomingMessage } from 'node:http'

interface Options {
  base: string
  direction: 'upload' | 'download'
  bytes: number
  headers: Record<string, string>
  timeoutMs?: number
}

const { base, direction, bytes, headers, timeoutMs = 120_000 } = JSON.parse(process.argv[2] ?? '{}') as Options
const CHUNK = Buffer.alloc(64 * 1024, 'u')

function fail (message: string): never {
  process.stdout.write(JSON.stringify({ ok: false, error: message }) + '\n')
  process.exit(1)
}

setTimeout(() => { fail(`timed out after ${timeoutMs} ms`) }, timeoutMs).unref()

function readAll (res: IncomingMessage, keep: boolean): Promise<{ count: number, text: string }> {
  return new Promise((resolve, reject) => {
    let count = 0
    const chunks: Buffer[] = []
    res.on('data', (c: Buffer) => { count += c.length; if (keep) chunks.push(c) })
    res.on('end', () => { resolve({ count, text: keep ? Buffer.concat(chunks).toString() : '' }) })
    res.on('error', reject)
  })
}

async function upload (): Promise<void> {
  const started = performance.now()
  const req = request(`${base}/upload`, {
    method: 'POST',
    headers: { ...headers, 'content-type': 'application/octet-stream', 'content-length': String(bytes) }
  })
  const answer = new Promise<IncomingMessage>((resolve, reject) => {
    req.on('response', resolve)
    req.on('error', reject)
  })
  let left = bytes
  while (left > 0) {
    const n = Math.min(left, CHUNK.length)
    left -= n
    if (!req.write(n === CHUNK.length ? CHUNK : CHUNK.subarray(0, n))) {
      await new Promise((resolve) => req.once('drain', resolve))
    }
  }
  req.end()
  const res = await answer
  const { text } = await readAll(res, true)
  const seconds = (performance.now() - started) / 1000
  const received = (JSON.parse(text) as { received?: number }).received
  if (res.statusCode !== 200 || received !== bytes) fail(`upload answered ${res.statusCode}: ${text.slice(0, 200)}`)
  process.stdout.write(JSON.stringify({ ok: true, bytes, seconds }) + '\n')
}

async function download (): Promise<void> {
  const started = performance.now()
  const res = await new Promise<IncomingMessage>((resolve, reject) => {
    const req = request(`${base}/download?bytes=${bytes}`, { headers })
    req.on('response', resolve)
    req.on('error', reject)
    req.end()
  })
  const { count } = await readAll(res, false)
  const seconds = (performance.now() - started) / 1000
  if (res.statusCode !== 200 || count !== bytes) fail(`download answered ${res.statusCode} with ${count} bytes`)
  process.stdout.write(JSON.stringify({ ok: true, bytes, seconds }) + '\n')
}

await (direction === 'upload' ? upload() : download()).catch((err: unknown) => { fail(String(err)) })
process.exit(0)
