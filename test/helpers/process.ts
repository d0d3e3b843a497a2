import { spawn, type ChildProcess } from 'node:child_process'
import { existsSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import type { Test } from 'tap'

export const MAIN = fileURLToPath(new URL('../../dist/main.js', import.meta.url))

export interface Running {
  child: ChildProcess
  stdout: () => string
  stderr: () => string
  exited: Promise<number | null>
  /** Resolves with the first stdout line matching the pattern. */
  waitFor: (pattern: RegExp, timeoutMs?: number) => Promise<RegExpExecArray>
}

/** Runs the built entry point (`npm test` builds it first) as a real process. */
export function runMain (t: Test, args: string[], env: Record<string, string>, nodeArgs: string[] = []): Running {
  if (!existsSync(MAIN)) throw new Error(`${MAIN} is missing: run npm run build (npm test does)`)
  const child = spawn(process.execPath, [...nodeArgs, MAIN, ...args], { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] })
  let out = ''
  let err = ''
  child.stdout?.setEncoding('utf8').on('data', (c: string) => { out += c })
  child.stderr?.setEncoding('utf8').on('data', (c: string) => { err += c })
  const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => { resolve(code) }))
  t.teardown(() => { if (child.exitCode === null) child.kill('SIGKILL') })
  const waitFor = async (pattern: RegExp, timeoutMs = 10_000): Promise<RegExpExecArray> => {
    const deadline = Date.now() + timeoutMs
    while (Date.now() < deadline) {
      const match = pattern.exec(out)
      if (match !== null) return match
      if (child.exitCode !== null) break
      await new Promise((resolve) => setTimeout(resolve, 20))
    }
    throw new Error(`no ${pattern} in output:\n${out}\n${err}`)
  }
  return { child, stdout: () => out, stderr: () => err, exited, waitFor }
}
