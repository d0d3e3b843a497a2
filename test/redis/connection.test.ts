// The fleet's Redis connection (src/redis/connection.ts), as every user of it opens it:
// errors described without any password it has used (a rotated one too), the rotated
// credentials used on reconnection, commands refused at once rather than queued while it is
// not connected, and a first connection that gives up, at the earliest after 1 s, when Redis
// does not answer. Real redis-server on free ports; a host that never completes the TCP
// handshake is a child process whose listener's queue is full and never drained.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { connect, createServer, type Socket } from 'node:net'
import t, { type Test } from 'tap'
import { openRedis } from '../../src/redis/connection.js'
import { eventually } from '../helpers/eventually.js'
import { reapOnExit } from '../helpers/process.js'
import { startRedis } from '../helpers/redis.js'

type Connection = ReturnType<typeof openRedis>

function open (t: Test, options: Parameters<typeof openRedis>[0]): Connection {
  const connection = openRedis(options)
  // Connection failures are expected here: the tests read what connect() and commands answer.
  connection.client.on('error', () => {})
  t.teardown(() => { connection.client.disconnect() })
  return connection
}

/** Resolves with what connect() answered and how long it took; fails the test past `limitMs`. */
async function timedConnect (t: Test, connection: Connection, limitMs = 15_000): Promise<{ up: boolean | 'hung', ms: number }> {
  const start = performance.now()
  let timer: NodeJS.Timeout | undefined
  const hung = new Promise<'hung'>((resolve) => { timer = setTimeout(() => { resolve('hung') }, limitMs) })
  const up = await Promise.race([connection.connect(), hung])
  clearTimeout(timer)
  if (up === 'hung') t.fail(`connect() did not answer within ${limitMs} ms`)
  return { up, ms: performance.now() - start }
}

t.test('errors are described without the URL or its password', async (t) => {
  const { describe } = open(t, { url: 'redis://sidecar:s3cr%40t@127.0.0.1:6390/2', timeoutMs: 100 })
  t.equal(describe(new Error('cannot reach redis://sidecar:s3cr%40t@127.0.0.1:6390/2 now')), 'cannot reach redis://127.0.0.1:6390 now',
    'the whole URL is shown as scheme://host:port: no user, no password')
  t.equal(describe(new Error('AUTH s3cr@t refused')), 'AUTH *** refused', 'the password alone, as sent (decoded)')
  t.equal(describe('s3cr@t'), '***', 'not only Errors')

  const plain = open(t, { url: 'redis://127.0.0.1:6390', timeoutMs: 100 })
  t.equal(plain.describe(new Error('connect ECONNREFUSED 127.0.0.1:6390')), 'connect ECONNREFUSED 127.0.0.1:6390', 'no password: the reason as it is')
})

t.test('a rotated password: used from the next reconnection, and never shown, old or new', async (t) => {
  const redis = await startRedis(t, { password: 'abc' })
  // The new password extends the old one: each must be hidden whole, not the old one inside the new.
  const rotated = `redis://sidecar:abcdef@127.0.0.1:${redis.port}`
  let current = redis.url
  const connection = open(t, { url: redis.url, timeoutMs: 2_000, currentUrl: () => current })
  t.equal((await timedConnect(t, connection)).up, true)
  t.equal(await connection.client.call('ACL', 'WHOAMI'), 'default')

  t.equal(await redis.command('ACL', 'SETUSER', 'sidecar', 'on', '>abcdef', '~*', '&*', '+@all'), '+OK')
  current = rotated
  // The old password stops working, and every connection must authenticate anew.
  await redis.setPassword('something-else')
  await eventually(t, 'reconnected as the rotated user', async () =>
    await connection.client.call('ACL', 'WHOAMI').then((who) => who === 'sidecar', () => false))

  t.equal(connection.describe(new Error(`lost ${rotated}`)), `lost redis://127.0.0.1:${redis.port}`)
  t.equal(connection.describe(new Error('WRONGPASS abcdef or abc')), 'WRONGPASS *** or ***')
  t.equal(connection.describe(new Error(`was ${redis.url}`)), `was redis://127.0.0.1:${redis.port}`)
})

t.test('the connection names itself to Redis, for operators reading CLIENT LIST', async (t) => {
  const redis = await startRedis(t)
  const connection = open(t, { url: redis.url, timeoutMs: 2_000 })
  t.equal((await timedConnect(t, connection)).up, true, 'connect() says true when Redis is up')
  t.equal(await connection.client.client('GETNAME'), 'store-auth-proxy')
})

t.test('a command sent while not connected fails at once: it is not queued until Redis answers', async (t) => {
  const redis = await startRedis(t)
  const connection = open(t, { url: redis.url, timeoutMs: 2_000 })
  await t.rejects(connection.client.ping(), 'not connected yet: refused, although Redis is there to answer')
})

t.test('a first connection to a Redis that answers nothing gives up, after 1 s at the earliest', async (t) => {
  const redis = await startRedis(t)
  redis.freeze()
  t.teardown(() => { redis.thaw() })
  const connection = open(t, { url: redis.url, timeoutMs: 100 })
  const { up, ms } = await timedConnect(t, connection)
  t.equal(up, false)
  t.ok(ms >= 990, `a command timeout under 1 s still gives the connection 1 s (${Math.round(ms)} ms)`)
})

t.test('a first connection to a Redis still loading its data set gives up, after 1 s at the earliest', async (t) => {
  const port = await stillLoading(t)
  const connection = open(t, { url: `redis://127.0.0.1:${port}`, timeoutMs: 100 })
  const { up, ms } = await timedConnect(t, connection)
  t.equal(up, false, 'not ready within the bound: false, although the client would go on waiting for the load')
  t.ok(ms >= 990, `(${Math.round(ms)} ms)`)
})

t.test('a first connection refused (nothing listening) says false', async (t) => {
  const redis = await startRedis(t)
  await redis.stop()
  const connection = open(t, { url: redis.url, timeoutMs: 100 })
  t.equal((await timedConnect(t, connection)).up, false)
})

t.test('a first connection to a host that never completes the handshake gives up, after 1 s at the earliest', async (t) => {
  const port = await blackHole(t)
  const connection = open(t, { url: `redis://127.0.0.1:${port}`, timeoutMs: 100 })
  const { up, ms } = await timedConnect(t, connection)
  t.equal(up, false)
  t.ok(ms >= 990, `the TCP handshake too is given 1 s (${Math.round(ms)} ms)`)
})

/**
 * A port whose SYNs go unanswered, like a black-holed address: a child process listens with
 * the smallest backlog and then blocks its event loop, so nothing is accepted; once the
 * kernel's queue for it is full, it drops any further handshake.
 */
async function blackHole (t: Test): Promise<number> {
  const child = spawn(process.execPath, ['-e', `
    const server = require('node:net').createServer().listen({ port: 0, host: '127.0.0.1', backlog: 1 }, () => {
      process.stdout.write(server.address().port + '\\n')
      process.stdin.once('data', () => {
        process.stdout.write('blocked\\n')
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0)
      })
    })`], { stdio: ['pipe', 'pipe', 'inherit'] })
  reapOnExit(child)
  t.teardown(() => { child.kill('SIGKILL') })
  const lines = child.stdout.setEncoding('utf8')
  const [line] = await once(lines, 'data') as [string]
  const port = Number(line.trim())
  child.stdin.write('block\n')
  await once(lines, 'data')
  const fillers: Socket[] = []
  t.teardown(() => { for (const s of fillers) s.destroy() })
  // Connections fill the queue (nothing accepts them any more) until one is not answered: its
  // SYN was dropped (a loopback handshake takes microseconds; the first retry is 1 s later).
  await eventually(t, 'the listener\'s queue full', async () => {
    const probe = connect(port, '127.0.0.1')
    probe.on('error', () => {})
    fillers.push(probe)
    let timer: NodeJS.Timeout | undefined
    const answered = await Promise.race([
      once(probe, 'connect').then(() => true),
      new Promise<boolean>((resolve) => { timer = setTimeout(() => { resolve(false) }, 2_000) })
    ])
    clearTimeout(timer)
    return !answered
  }, 30_000)
  return port
}

/**
 * A server that answers like a Redis loading a large data set: every INFO says `loading:1`
 * (a client then waits for the load to end: ioredis's ready check asks again, for as long
 * as it takes), every other command +OK.
 */
async function stillLoading (t: Test): Promise<number> {
  const info = '# Persistence\r\nloading:1\r\nloading_eta_seconds:60\r\n'
  const sockets = new Set<Socket>()
  const server = createServer((socket) => {
    sockets.add(socket)
    socket.setEncoding('utf8').on('data', (chunk: string) => {
      // One reply per command: each starts with its array header (`*N`), the name follows as a bulk string.
      for (const command of chunk.split(/^\*\d+\r\n/m).filter((c) => c !== '')) {
        const name = command.split('\r\n')[1]?.toLowerCase()
        socket.write(name === 'info' ? `$${Buffer.byteLength(info)}\r\n${info}\r\n` : '+OK\r\n')
      }
    })
  })
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => {
    for (const s of sockets) s.destroy()
    server.close()
  })
  const address = server.address()
  return typeof address === 'object' && address !== null ? address.port : 0
}
