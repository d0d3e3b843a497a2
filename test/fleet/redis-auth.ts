import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { createServer } from 'node:net'
import type { Test } from 'tap'
import type { RedisServer } from '../helpers/redis.js'

async function freePort (): Promise<number> {
  const server = createServer()
  server.listen(0, '127.0.0.1')
  await once(server, 'listening')
  const address = server.address()
  const port = typeof address === 'object' && address !== null ? address.port : 0
  await new Promise<void>((resolve) => server.close(() => { resolve() }))
  return port
}

async function launch (port: number, password: string): Promise<ChildProcess> {
  // The password goes in on stdin as a config file, so it is not on any command line.
  const child = spawn('redis-server', ['-', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no'], {
    stdio: ['pipe', 'pipe', 'pipe']
  })
  child.stdin?.end(`requirepass "${password}"\n`)
  let output = ''
  return await new Promise<ChildProcess>((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`redis-server on port ${port} did not start:\n${output}`)) }, 10_000)
    child.once('error', (error) => { clearTimeout(timer); reject(error) })
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

/**
 * A redis-server like test/helpers/redis.ts's, but requiring `password` (`requirepass`):
 * `url` is the one to give the sidecar, password included; `stop()`/`start()` as there.
 */
export async function startRedisWithPassword (t: Test, password: string): Promise<RedisServer> {
  let port = 0
  let child: ChildProcess | undefined
  for (let attempt = 0; child === undefined; attempt++) {
    port = await freePort()
    try {
      child = await launch(port, password)
    } catch (error) {
      if (attempt >= 4) throw error
    }
  }
  const redis: RedisServer = {
    port,
    url: `redis://:${password}@127.0.0.1:${port}`,
    get running () { return child !== undefined && child.exitCode === null && child.signalCode === null },
    start: async () => {
      if (redis.running) return
      child = await launch(port, password)
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
