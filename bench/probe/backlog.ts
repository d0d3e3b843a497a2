// What a burst of connections meets when the listener's event loop is starved: an
// http.Server on 127.0.0.1 with the given listen backlog blocks its event loop while a
// child process opens N connections and sends a GET on each; every caller's outcome is
// counted (a 200, or the error it got), with the kernel's listen overflows (`nstat`,
// machine-wide) around it.
//
//   node bench/probe/backlog.ts [--backlog 511] [--callers 1500] [--block-ms 3000]
//
// (Node 24 strips the types; the built dist/bench/probe/backlog.js runs too.) 511 is Node's
// default backlog, which the sidecar's admin listener keeps; its proxy listener's follows
// MAX_CONNECTIONS (src/overload/manager.ts, proxyBacklog). The kernel caps both at net.core.somaxconn.
import { execFile, execFileSync } from 'node:child_process'
import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import { parseArgs } from 'node:util'

const { values } = parseArgs({
  options: {
    backlog: { type: 'string', default: '511' },
    callers: { type: 'string', default: '1500' },
    'block-ms': { type: 'string', default: '3000' }
  }
})
const backlog = Number(values.backlog)
const callers = Number(values.callers)
const blockMs = Number(values['block-ms'])

/** The machine's listen overflows so far, or undefined without nstat. */
function listenOverflows (): number | undefined {
  try {
    const out = execFileSync('nstat', ['-az', 'TcpExtListenOverflows'], { encoding: 'utf8' })
    return Number(/TcpExtListenOverflows\s+(\d+)/.exec(out)?.[1])
  } catch {
    return undefined
  }
}

/** Runs in the child: N connections at once, one GET each, outcomes counted. */
const CALLERS = `
const net = require('node:net')
const [port, n] = process.argv.slice(1).map(Number)
const outcome = {}
let left = n
for (let i = 0; i < n; i++) {
  const s = net.connect(port, '127.0.0.1', () => s.write('GET / HTTP/1.1\\r\\nHost: x\\r\\nConnection: close\\r\\n\\r\\n'))
  let head = ''
  let error
  s.setTimeout(30000, () => s.destroy(new Error('no answer in 30 s')))
  s.on('data', (d) => { head += d })
  s.on('error', (e) => { error = e.code ?? e.message })
  s.on('close', () => {
    const key = error ?? (head.split('\\r\\n')[0] || 'closed without an answer')
    outcome[key] = (outcome[key] ?? 0) + 1
    if (--left === 0) console.log(JSON.stringify(outcome))
  })
}`

const server = createServer((_req, res) => { res.end('ok') })
server.listen({ port: 0, host: '127.0.0.1', backlog }, () => {
  const { port } = server.address() as AddressInfo
  const before = listenOverflows()
  const started = performance.now()
  execFile(process.execPath, ['-e', CALLERS, String(port), String(callers)], (err, out) => {
    const after = listenOverflows()
    console.log(JSON.stringify({
      backlog,
      callers,
      blockMs,
      outcomes: err === null ? JSON.parse(out) as unknown : String(err),
      listenOverflows: before === undefined || after === undefined ? 'unknown (no nstat)' : after - before,
      seconds: Math.round((performance.now() - started) / 100) / 10
    }))
    server.close()
  })
  // Starve the loop while the connections arrive, as a loaded machine does.
  setTimeout(() => { const until = performance.now() + blockMs; while (performance.now() < until); }, 100)
})
