// Child processes of the benchmark: started pinned with taskset, logged to the run's
// logs/, stopped (and killed with their children when the harness exits); small waits.
import { spawn, type ChildProcess } from 'node:child_process'
import { createWriteStream } from 'node:fs'
import { connect, createServer } from 'node:net'
import { join } from 'node:path'
import { childrenOf } from './proc.js'
import { die } from './options.js'

const children = new Set<ChildProcess>()

export function killAll (): void {
  for (const child of children) {
    if (child.exitCode !== null || child.signalCode !== null || child.pid === undefined) continue
    // nginx's worker would outlive a killed master: its children go first.
    for (const pid of childrenOf(child.pid)) {
      try { process.kill(pid, 'SIGKILL') } catch {}
    }
    child.kill('SIGKILL')
  }
}
/** No child outlives the harness: on exit, and on SIGINT/SIGTERM. */
export function killChildrenOnExit (): void {
  process.on('exit', killAll)
  for (const signal of ['SIGINT', 'SIGTERM'] as const) {
    process.on(signal, () => { killAll(); process.exit(130) })
  }
}

export interface Spawned {
  child: ChildProcess
  pid: number
  exited: Promise<number | null>
  stdout: () => string
}

export function launch (
  name: string, command: string, args: string[],
  { core, env, logDir, keepStdout = false }: { core?: number, env?: NodeJS.ProcessEnv, logDir: string, keepStdout?: boolean }
): Spawned {
  const [cmd, argv] = core === undefined ? [command, args] : ['taskset', ['-c', String(core), command, ...args]]
  const child = spawn(cmd, argv, { env: env ?? process.env, stdio: ['ignore', 'pipe', 'pipe'] })
  children.add(child)
  const logFile = createWriteStream(join(logDir, `${name}.log`), { flags: 'a' })
  let out = ''
  child.stdout?.on('data', (c: Buffer) => { if (keepStdout) out += c.toString(); logFile.write(c) })
  child.stderr?.on('data', (c: Buffer) => { logFile.write(c) })
  const exited = new Promise<number | null>((resolve) => {
    child.on('exit', (code) => { children.delete(child); resolve(code) })
  })
  child.on('close', () => { logFile.end() })
  if (child.pid === undefined) die(`could not start ${command}`)
  // taskset execs the command, so the pid is the command's own.
  return { child, pid: child.pid, exited, stdout: () => out }
}

export async function stop (p: Spawned, signal: NodeJS.Signals = 'SIGTERM', graceMs = 15_000): Promise<void> {
  if (p.child.exitCode !== null || p.child.signalCode !== null) return
  p.child.kill(signal)
  const timer = setTimeout(() => { p.child.kill('SIGKILL') }, graceMs)
  await p.exited
  clearTimeout(timer)
}

/** Runs a command to its end (bounded) and returns its stdout. */
export async function runToEnd (name: string, command: string, args: string[], logDir: string, limitMs: number, core?: number, onPid?: (pid: number) => void): Promise<string> {
  const p = launch(name, command, args, { logDir, keepStdout: true, ...(core === undefined ? {} : { core }) })
  onPid?.(p.pid)
  const timer = setTimeout(() => { p.child.kill('SIGKILL') }, limitMs)
  await p.exited
  clearTimeout(timer)
  await new Promise((resolve) => setImmediate(resolve))
  return p.stdout()
}

export const sleep = (ms: number): Promise<void> => new Promise((resolve) => setTimeout(resolve, ms))

export async function freePort (): Promise<number> {
  return await new Promise((resolve, reject) => {
    const server = createServer()
    server.on('error', reject)
    server.listen(0, '127.0.0.1', () => {
      const address = server.address()
      const port = typeof address === 'object' && address !== null ? address.port : 0
      server.close(() => { resolve(port) })
    })
  })
}

export function tcpAccepts (port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = connect(port, '127.0.0.1')
    socket.once('connect', () => { socket.destroy(); resolve(true) })
    socket.once('error', () => { socket.destroy(); resolve(false) })
  })
}

export async function waitFor (what: string, check: () => Promise<boolean>, limitMs = 15_000, everyMs = 2): Promise<void> {
  const until = performance.now() + limitMs
  while (performance.now() < until) {
    if (await check()) return
    await sleep(everyMs)
  }
  throw new Error(`timed out waiting for ${what}`)
}

export async function httpOk (url: string): Promise<boolean> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(2000) })
    await res.arrayBuffer()
    return res.status === 200
  } catch {
    return false
  }
}
