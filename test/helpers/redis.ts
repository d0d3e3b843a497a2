import { spawn, type ChildProcess } from 'node:child_process'
import { once } from 'node:events'
import { mkdtemp, rm } from 'node:fs/promises'
import { connect, createServer } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import tap, { type Test } from 'tap'
import { reapOnExit } from './process.js'
import { REDIS, skipFileUnless } from './tools.js'

// Every test file that imports this one needs redis-server: without it (outside CI) the
// file is skipped with one line saying what to install.
skipFileUnless(tap, REDIS)

/**
 * A real redis-server (Debian's `redis-server`, Homebrew's `redis`) on a free loopback
 * port, in a directory of its own, stopped at teardown. `stop()` kills it (SIGKILL: the
 * abrupt loss a sidecar must survive) and `start()` brings it back on the same port,
 * empty, so a test can take Redis away mid-run and give it back. The fault injectors
 * beside them: frozen (SIGSTOP/SIGCONT), busy (`DEBUG SLEEP`), restarted with its data
 * (SAVE, kill, start on the same dir and file), a password set or cleared at runtime.
 */
export interface RedisServer {
  readonly port: number
  /** The URL a sidecar is given: with the password the server was started with. */
  readonly url: string
  /** Whether the server process is running (a frozen one is running). */
  readonly running: boolean
  /** The server's process id while it runs: what a test may read of it in /proc. */
  readonly pid: number | undefined
  start: () => Promise<void>
  stop: () => Promise<void>
}

export interface FaultyRedis extends RedisServer {
  /** Whether the process is stopped by SIGSTOP. */
  readonly frozen: boolean
  /** SIGSTOP: the process holds its connections and answers nothing (a busy node or a network stall looks alike). */
  freeze: () => void
  /** SIGCONT: it answers what queued meanwhile. */
  thaw: () => void
  /** One command on a connection of its own (AUTH first when a password is in force); its first reply line. */
  command: (...args: string[]) => Promise<string>
  /** `DEBUG SLEEP`: the server answers nobody for `ms`; resolves when it is awake again. */
  sleep: (ms: number) => Promise<void>
  /** Killed and started again on the same port: empty, or (SAVE first) with its data. */
  restart: (options: { withData: boolean }) => Promise<void>
  /**
   * `CONFIG SET requirepass` (undefined clears it), then every client connection is
   * closed, so clients must authenticate anew: with the wrong password or none they get
   * NOAUTH/WRONGPASS.
   */
  setPassword: (password: string | undefined) => Promise<void>
}

export interface RedisOptions {
  /** `requirepass`, given on stdin as a config file so it is on no command line; in `url`. */
  password?: string
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

const DB_FILE = 'dump.rdb'

async function launch (port: number, dir: string, password: string | undefined): Promise<ChildProcess> {
  // `--save ''`: no snapshot unless a test asks for one (SAVE). DEBUG is refused by
  // default since Redis 7; `local` allows it from loopback, where the tests are.
  const child = spawn('redis-server', [
    '-', '--port', String(port), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no',
    '--dir', dir, '--dbfilename', DB_FILE, '--enable-debug-command', 'local'
  ], { stdio: ['pipe', 'pipe', 'pipe'] })
  // Killed with this process however it ends (a file killed on timeout, or StrykerJS ending a
  // test file at its first failure): a teardown alone would leave it running.
  reapOnExit(child)
  child.stdin?.end(password === undefined ? '' : `requirepass "${password}"\n`)
  let output = ''
  return await new Promise<ChildProcess>((resolve, reject) => {
    const timer = setTimeout(() => { child.kill('SIGKILL'); reject(new Error(`redis-server on port ${port} did not start:\n${output}`)) }, 10_000)
    child.once('error', (error) => {
      clearTimeout(timer)
      reject(new Error(`cannot run redis-server (${REDIS.install}): ${error.message}`))
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

const encode = (args: string[]): string => `*${args.length}\r\n` + args.map((a) => `$${Buffer.byteLength(a)}\r\n${a}\r\n`).join('')

/** Sends `commands` on one connection and resolves with the last reply's first line (errors too: `-ERR ...`). */
async function send (port: number, commands: string[][]): Promise<string> {
  const socket = connect(port, '127.0.0.1')
  socket.setEncoding('utf8')
  let text = ''
  return await new Promise<string>((resolve, reject) => {
    socket.once('error', reject)
    socket.once('connect', () => { socket.write(commands.map(encode).join('')) })
    socket.on('data', (chunk: string) => {
      text += chunk
      // Simple, error and integer replies are one line; a bulk reply is its length line
      // and its data. Enough for the admin commands used here (none answers an array).
      const lines = text.split('\r\n')
      const replies: string[] = []
      for (let i = 0; i < lines.length - 1; i++) {
        const line = lines[i] ?? ''
        if (line.startsWith('$') && line !== '$-1') {
          if (i + 1 >= lines.length - 1) break
          replies.push(lines[i + 1] ?? '')
          i += 1
        } else {
          replies.push(line)
        }
      }
      if (replies.length >= commands.length) {
        socket.destroy()
        resolve(replies[commands.length - 1] ?? '')
      }
    })
    // A server killed mid-command (DEBUG SLEEP, then SIGKILL) closes the connection with no
    // error: without this the command would never settle, and whoever awaits it would hang.
    socket.once('close', () => { reject(new Error(`redis on port ${port} closed the connection before answering`)) })
  })
}

/** Starts a redis-server for this test; it is killed, and its directory removed, at the test's teardown. */
export async function startRedis (t: Pick<Test, 'teardown'>, options: RedisOptions = {}): Promise<FaultyRedis> {
  const dir = await mkdtemp(join(tmpdir(), 'redis-'))
  let password = options.password
  let port = 0
  let child: ChildProcess | undefined
  let frozen = false
  // A port found free can be taken before redis binds it: try a few.
  for (let attempt = 0; child === undefined; attempt++) {
    port = await freePort()
    try {
      child = await launch(port, dir, password)
    } catch (error) {
      if (attempt >= 4) throw error
    }
  }
  const alive = (c: ChildProcess | undefined): c is ChildProcess => c !== undefined && c.exitCode === null && c.signalCode === null
  const command = async (...args: string[]): Promise<string> =>
    await send(port, password === undefined ? [args] : [['AUTH', password], args])
  const redis: FaultyRedis = {
    port,
    url: options.password === undefined ? `redis://127.0.0.1:${port}` : `redis://:${options.password}@127.0.0.1:${port}`,
    get running () { return alive(child) },
    get pid () { return alive(child) ? child.pid : undefined },
    get frozen () { return frozen && alive(child) },
    start: async () => {
      if (alive(child)) return
      // Empty: a snapshot left by an earlier restart({ withData }) would be loaded.
      await rm(join(dir, DB_FILE), { force: true })
      password = options.password
      child = await launch(port, dir, password)
      frozen = false
    },
    stop: async () => {
      const current = child
      if (!alive(current)) return
      const exited = once(current, 'exit')
      current.kill('SIGKILL')
      await exited
      frozen = false
    },
    freeze: () => {
      if (!alive(child) || frozen) return
      child.kill('SIGSTOP')
      frozen = true
    },
    thaw: () => {
      if (!alive(child) || !frozen) return
      child.kill('SIGCONT')
      frozen = false
    },
    command,
    sleep: async (ms) => { await command('DEBUG', 'SLEEP', String(ms / 1000)) },
    restart: async ({ withData }) => {
      if (withData && alive(child)) {
        redis.thaw()
        const saved = await command('SAVE')
        if (saved !== '+OK') throw new Error(`SAVE answered ${saved}`)
      }
      await redis.stop()
      if (!withData) await rm(join(dir, DB_FILE), { force: true })
      // The same password as before the kill: a snapshot does not hold it, the start does.
      child = await launch(port, dir, password)
    },
    setPassword: async (next) => {
      const set = await command('CONFIG', 'SET', 'requirepass', next ?? '')
      if (set !== '+OK') throw new Error(`CONFIG SET requirepass answered ${set}`)
      password = next
      await command('CLIENT', 'KILL', 'TYPE', 'normal')
    }
  }
  t.teardown(async () => {
    redis.thaw()
    await redis.stop()
    await rm(dir, { recursive: true, force: true })
  })
  return redis
}
