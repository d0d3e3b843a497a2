// The benchmark's upstream: a minimal HTTP/1.1 server straight on node:net, in
// its own process, so that it costs as little CPU per request as possible and
// the proxies, not the upstream, set the pace. It never checks a token: the
// three targets (direct, sidecar, nginx) must reach exactly the same code.
//
//   GET  <any path>                small JSON answer (about 200 bytes)
//   GET  /download?bytes=N         N bytes streamed, with backpressure
//   POST /upload                   reads the body (Content-Length or chunked), answers {"received":N}
//   any other method               reads the body, answers the small JSON
//
//   node dist/bench/upstream.js PORT   prints "listening PORT" once it accepts connections
import { createServer, type Socket } from 'node:net'

const SMALL_BODY = Buffer.from(JSON.stringify({
  tiPartNumber: 'LM358BIDR',
  description: 'Dual, 30-V, 700-kHz operational amplifier',
  quantity: 1_234_567,
  currency: 'USD',
  pricing: [{ priceBreaks: [{ priceBreakQuantity: 1, price: 0.25 }, { priceBreakQuantity: 1000, price: 0.11 }] }]
}))
const SMALL_HEAD = 'HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n' +
  `content-length: ${SMALL_BODY.length}\r\n`
const SMALL_RESPONSE = Buffer.concat([Buffer.from(SMALL_HEAD + '\r\n'), SMALL_BODY])
const SMALL_RESPONSE_CLOSE = Buffer.concat([Buffer.from(SMALL_HEAD + 'connection: close\r\n\r\n'), SMALL_BODY])
const SMALL_HEAD_ONLY = Buffer.from(SMALL_HEAD + '\r\n')

const DOWNLOAD_CHUNK = Buffer.alloc(64 * 1024, 'x')
const MAX_HEAD_BYTES = 64 * 1024
const CRLFCRLF = Buffer.from('\r\n\r\n')

const CONTENT_LENGTH = /\r\ncontent-length:[ \t]*(\d+)/i
const CHUNKED = /\r\ntransfer-encoding:[^\r]*chunked/i
const CONNECTION_CLOSE = /\r\nconnection:[^\r]*close/i
const DOWNLOAD = /^\/download\?bytes=(\d+)$/

interface Request {
  method: string
  target: string
  close: boolean
  bodyBytes: number
}

type State =
  | { kind: 'head' }
  | { kind: 'length', remaining: number }
  | { kind: 'chunk-size', line: string }
  | { kind: 'chunk-data', remaining: number }
  | { kind: 'chunk-crlf', remaining: number }
  | { kind: 'trailer', line: string }

function handleConnection (socket: Socket): void {
  socket.setNoDelay(true)
  let pending: Buffer | undefined
  let state: State = { kind: 'head' }
  let request: Request | undefined
  // Set while a download streams: input is paused and parsed once it is done.
  let busy = false

  socket.on('error', () => { socket.destroy() })
  socket.on('data', (chunk: Buffer) => {
    pending = pending === undefined ? chunk : Buffer.concat([pending, chunk])
    parse()
  })

  function parse (): void {
    for (;;) {
      // A download in progress (busy) parses the rest once it is done.
      if (pending === undefined || busy || socket.destroyed) return
      const buf: Buffer = pending
      if (state.kind === 'head') {
        const end = buf.indexOf(CRLFCRLF)
        if (end === -1) {
          if (buf.length > MAX_HEAD_BYTES) socket.destroy()
          return
        }
        const head = buf.toString('latin1', 0, end + 2)
        take(end + 4)
        const firstSpace = head.indexOf(' ')
        const secondSpace = head.indexOf(' ', firstSpace + 1)
        request = {
          method: head.slice(0, firstSpace),
          target: head.slice(firstSpace + 1, secondSpace),
          close: CONNECTION_CLOSE.test(head) || head.startsWith('HTTP/1.0', secondSpace + 1),
          bodyBytes: 0
        }
        const length = CONTENT_LENGTH.exec(head)
        if (CHUNKED.test(head)) state = { kind: 'chunk-size', line: '' }
        else if (length?.[1] !== undefined && length[1] !== '0') state = { kind: 'length', remaining: Number(length[1]) }
        else respond()
        continue
      }
      if (state.kind === 'length' || state.kind === 'chunk-data') {
        const n = Math.min(state.remaining, buf.length)
        take(n)
        ;(request as Request).bodyBytes += n
        state.remaining -= n
        if (state.remaining === 0) {
          if (state.kind === 'length') respond()
          else state = { kind: 'chunk-crlf', remaining: 2 }
        }
        continue
      }
      if (state.kind === 'chunk-crlf') {
        const n = Math.min(state.remaining, buf.length)
        take(n)
        state.remaining -= n
        if (state.remaining === 0) state = { kind: 'chunk-size', line: '' }
        continue
      }
      // chunk-size or trailer: one line at a time.
      const lf = buf.indexOf(10)
      const line = state.line + buf.toString('latin1', 0, lf === -1 ? buf.length : lf)
      take(lf === -1 ? buf.length : lf + 1)
      if (lf === -1) {
        if (line.length > 1024) socket.destroy()
        state.line = line
        continue
      }
      const text = line.replace(/\r$/, '')
      if (state.kind === 'chunk-size') {
        const size = parseInt(text, 16)
        if (Number.isNaN(size)) { socket.destroy(); return }
        state = size === 0 ? { kind: 'trailer', line: '' } : { kind: 'chunk-data', remaining: size }
      } else if (text === '') {
        respond()
      } else {
        state = { kind: 'trailer', line: '' }
      }
    }
  }

  function take (n: number): void {
    pending = pending === undefined || n >= pending.length ? undefined : pending.subarray(n)
  }

  function respond (): void {
    const req = request as Request
    state = { kind: 'head' }
    request = undefined
    const download = req.method === 'GET' ? DOWNLOAD.exec(req.target) : null
    if (download?.[1] !== undefined) {
      streamDownload(Number(download[1]), req.close)
      return
    }
    if (req.method === 'POST' && req.target.startsWith('/upload')) {
      const body = Buffer.from(JSON.stringify({ received: req.bodyBytes }))
      socket.write(`HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: ${body.length}\r\n` +
        (req.close ? 'connection: close\r\n' : '') + '\r\n')
      socket.write(body)
      if (req.close) socket.end()
      return
    }
    if (req.method === 'HEAD') socket.write(SMALL_HEAD_ONLY)
    else socket.write(req.close ? SMALL_RESPONSE_CLOSE : SMALL_RESPONSE)
    if (req.close) socket.end()
  }

  function streamDownload (total: number, close: boolean): void {
    busy = true
    socket.pause()
    socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/octet-stream\r\n' +
      `content-length: ${total}\r\n` + (close ? 'connection: close\r\n' : '') + '\r\n')
    let left = total
    const pump = (): void => {
      while (left > 0) {
        const n = Math.min(left, DOWNLOAD_CHUNK.length)
        left -= n
        const more = socket.write(n === DOWNLOAD_CHUNK.length ? DOWNLOAD_CHUNK : DOWNLOAD_CHUNK.subarray(0, n))
        if (!more && left > 0) { socket.once('drain', pump); return }
      }
      busy = false
      if (close) { socket.end(); return }
      socket.resume()
      parse()
    }
    pump()
  }
}

const port = Number(process.argv[2] ?? 0)
const server = createServer({ noDelay: true }, handleConnection)
server.listen(port, '127.0.0.1', () => {
  const address = server.address()
  process.stdout.write(`listening ${typeof address === 'object' && address !== null ? address.port : port}\n`)
})
process.on('SIGTERM', () => { process.exit(0) })
