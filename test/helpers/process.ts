import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync, readdirSync, statSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import { onExit } from 'signal-exit'
import type { Test } from 'tap'

export const MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url))
const SRC = fileURLToPath(new URL('../../src', import.meta.url))
const DIST = fileURLToPath(new URL('../../dist', import.meta.url))

/**
 * A test's `skip` while StrykerJS mutates src/ (its tap runner sets STRYKER_NAMESPACE in
 * every test process): the sandbox has no build, and no mutant of src/ would reach one.
 */
export const SKIP_UNDER_MUTATION = process.env.STRYKER_NAMESPACE === undefined ? false : 'runs dist/main.js, which no mutant of src/ reaches'

export interface Running {
  child: ChildProcess
  stdout: () => string
  stderr: () => string
  exited: Promise<number | null>
  /** Resolves with the first stdout line matching the pattern. */
  waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpExecArray>
}

const children = new Set<ChildProcess>()
let reaping = false

/**
 * Kills `child` when this process ends, however it ends: normally, on an uncaught
 * error, or on the signal tap sends a test file that ran out of time (signal-exit,
 * tap's own dependency, runs the hook and then lets the signal end the process).
 * A teardown alone runs only when the test ends by itself.
 */
export function reapOnExit (child: ChildProcess): void {
  if (!reaping) {
    reaping = true
    onExit(() => { for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL') })
  }
  children.add(child)
  child.once('exit', () => { children.delete(child) })
}

let freshness: string | undefined
/**
 * Why dist/ cannot stand for src/ (a source newer than its build, or one not built), or
 * '' if it can. Tests that run dist/main.js would otherwise test yesterday's code.
 */
export function staleBuild (): string {
  if (freshness !== undefined) return freshness
  const stale: string[] = []
  const walk = (dir: string): void => {
    for (const entry of readdirSync(dir, { withFileTypes: true })) {
      const path = join(dir, entry.name)
      if (entry.isDirectory()) { walk(path); continue }
      if (!entry.name.endsWith('.ts') || entry.name.endsWith('.d.ts')) continue
      const built = join(DIST, relative(SRC, path)).replace(/\.ts$/, '.js')
      if (!existsSync(built) || statSync(built).mtimeMs < statSync(path).mtimeMs) stale.push(relative(SRC, path))
    }
  }
  walk(SRC)
  freshness = stale.length === 0 ? '' : `dist/ is older than src/ (${stale.slice(0, 5).join(', ')}${stale.length > 5 ? ', ...' : ''}): run npm run build (npm test does)`
  return freshness
}

/** Runs the built entry point (`npm test` builds it first) as a real process. */
export function runMain (t: Test, args: string[], env: Record<string, string>, nodeArgs: string[] = []): Running {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build (npm test does)`)
  const stale = staleBuild()
  if (stale !== '') throw new Error(stale)
  const child = spawn(process.execPath, [...nodeArgs, MAIN, ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  reapOnExit(child)
  let out = ''
  let err = ''
  child.stdout?.setEncoding('utf8').on('data', (c: string) => { out += c })
  child.stderr?.setEncoding('utf8').on('data', (c: string) => { err += c })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => { resolve(code) }))
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  /** Checks at every piece of output, not on a timer; gives up when the process exits or at the deadline. */
  const waitFor = async (pattern: RegExp, timeoutMs = 10_000): Promise<RegExpExecArray> => await new Promise((resolve, reject) => {
    const check = (): boolean => {
      const match = pattern.exec(out)
      if (match === null) return false
      done()
      resolve(match)
      return true
    }
    const fail = (why: string) => (): void => {
      if (check()) return
      done()
      reject(new Error(`no ${pattern} in output (${why}):\n${out}\n${err}`))
    }
    const onExited = fail('the process exited')
    const timer = setTimeout(fail(`not within ${timeoutMs} ms`), timeoutMs)
    const done = (): void => {
      clearTimeout(timer)
      child.stdout?.off('data', check)
      child.off('exit', onExited)
    }
    if (check()) return
    if (child.exitCode !== null) { onExited(); return }
    child.stdout?.on('data', check)
    child.once('exit', onExited)
  })
  return { child, stdout: () => out, stderr: () => err, exited, waitFor }
}
