// A redis-server of the benchmark's own (Debian's), on a free loopback port, pinned like the
// rest of the load side, no persistence; stopped by its process id. Its commands go through
// ioredis, the client the sidecar uses.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { Redis } from 'ioredis'
import { freePort, launch, stop, tcpAccepts, waitFor, type Spawned } from './processes.js'

export interface BenchRedis {
  url: string
  process: Spawned
  /** One command's reply (`KEYS`, `INFO commandstats`, …). */
  command: (name: string, ...args: string[]) => Promise<unknown>
  stop: () => Promise<void>
}

export async function startRedis (logDir: string, core: number | undefined): Promise<BenchRedis> {
  const port = await freePort()
  const dir = mkdtempSync(join(tmpdir(), 'bench-redis-'))
  const p = launch('redis', 'redis-server', ['--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', dir], {
    logDir, ...(core === undefined ? {} : { core })
  })
  await waitFor('redis-server', () => tcpAccepts(port), 10_000, 20)
  const url = `redis://127.0.0.1:${port}`
  const client = new Redis(url, { lazyConnect: true, maxRetriesPerRequest: 1 })
  await client.connect()
  return {
    url,
    process: p,
    command: async (name, ...args) => await client.call(name, ...args),
    async stop () {
      client.disconnect()
      await stop(p)
    }
  }
}
