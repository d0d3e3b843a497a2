import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import type { Test } from 'tap'

/**
 * A real redis-server (Debian's `redis-server`; `.ci/run` installs it) on a free loopback
 * port, with no persistence, stopped at teardown. `stop()` kills it (SIGKILL: the
 * abrupt loss a sidecar must survive) and `start()` brings it back on the same port,
 * empty, so a test can take Redis away mid-run and give it back.
 */
export interface RedisServer {
  readonly port: number
  readonly url: string
  /** Whether the server process is running. */
  readonly running: boolean
  start: () => Promise<void>
  stop: () => Promise<void>
}

async function freePort (): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  await new Promise<void>((resolve) => server.close(() => { resolve() }))
  return port
}

async function launch (port: number): Promise<ChildProcess> {
  const child = spawn('redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['ignore', 'pipe', 'pipe']
  })
  let output = ''
  return await new Promise<ChildProcess>((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`redis-server on port ${port} did not start:\n${output}`)) }, 10_000)
    child.once('error', (error) => {
      clearTimeout(timer)
      reject(new Error(`cannot run redis-server (apt-get install -y redis-server; .ci/run does): ${error.message}`))
    })
    child.once('exit', (code) => { clearTimeout(timer); reject(new Error(`redis-server exited with ${String(code)}:\n${output}`)) })
    child.stdout?.setEncoding('utf8').on('data', (chunk: string) => {
      output += chunk
      if (output.includes('Ready to accept connections')) {
        clearTimeout(timer)
        child.removeAllListeners('exit')
        child.stdout?.removeAllListeners('data').resume()
        resolve(child)
      }
    })
    child.stderr?.resume()
  })
}

/** Starts a redis-server for this test; it is killed at the test's teardown. */
export async function startRedis (t: Test): Promise<RedisServer> {
  let port = 0
  let child: ChildProcess | undefined
  // A port found free can be taken before redis binds it: try a few.
  for (let attempt = 0; child === undefined; attempt++) {
    port = await freePort()
    try {
      child = await launch(port)
    } catch (error) {
      if (attempt >= 4) throw error
    }
  }
  const redis: RedisServer = {
    port,
    url: `redis://127.0.0.1:${port}`,
    get running () { return child !== undefined && child.exitCode === null && child.signalCode === null },
    start: async () => {
      if (redis.running) return
      child = await launch(port)
    },
    stop: async () => {
      const current = child
      if (current === undefined || current.exitCode !== null || current.signalCode !== null) return
      const exited = once(current, 'exit')
      current.kill('SIGKILL')
      await exited
    }
  }
  t.teardown(redis.stop)
  return redis
}
