// The programs some tests need besides Node.js, and what to install for each. Without one,
// the tests that need it are skipped with one line naming the package (README's quick start
// names them all); under CI (CI=true) nothing may be skipped, so a missing one fails instead.
// `npm test` (test/run.ts) lists what is missing before it starts.
import { spawnSync } from 'node:child_process'
import { existsSync } from 'node:fs'
import { join, resolve } from 'node:path'

export interface Tool {
  /** The command, as the tests run it. */
  readonly command: string
  /** What it is for, in a few words. */
  readonly usedBy: string
  /** Where it comes from: Debian's package and Homebrew's. */
  readonly install: string
  readonly present: () => boolean
}

/** Whether `command args` can be started at all (its exit status does not matter). */
function starts (command: string, args: string[]): boolean {
  return spawnSync(command, args, { stdio: 'ignore', timeout: 30_000 }).error === undefined
}

function tool (command: string, args: string[], usedBy: string, install: string): Tool {
  let found: boolean | undefined
  return { command, usedBy, install, present: () => (found ??= starts(command, args)) }
}

export const REDIS = tool('redis-server', ['--version'], 'the Redis-backed budgets and cache',
  'Debian: apt-get install redis-server; Homebrew: brew install redis')
export const PROMTOOL = tool('promtool', ['--version'], 'the chart\'s alerting rules',
  'Debian: apt-get install prometheus; Homebrew: brew install prometheus')
export const SS = tool('ss', ['-V'], 'the listen backlog', 'Debian: apt-get install iproute2 (Linux only)')
export const TINYPROXY = tool('tinyproxy', ['-v'], 'the egress proxy with Basic authentication',
  'Debian: apt-get install tinyproxy; Homebrew: brew install tinyproxy')
export const CURL = tool('curl', ['--version'], 'the demo\'s tour, run as printed', 'Debian: apt-get install curl; Homebrew: brew install curl')
export const WRK = tool('wrk', ['-v'], 'the memory-cgroup load test', 'Debian: apt-get install wrk; Homebrew: brew install wrk')

/**
 * The Helm chart's renderer: a real `helm` on PATH, else the team's helm-template tool where
 * HELM_TEMPLATE_DIR points at it (it also carries validate.mjs, Kubernetes' schemas).
 */
export type ChartRenderer = { kind: 'helm' } | { kind: 'helm-template', dir: string }

let renderer: ChartRenderer | null | undefined

export function chartRenderer (): ChartRenderer | undefined {
  if (renderer === undefined) {
    const dir = process.env.HELM_TEMPLATE_DIR ?? ''
    renderer = starts('helm', ['version', '--short'])
      ? { kind: 'helm' }
      : dir !== '' && existsSync(join(dir, 'helm-template.sh')) ? { kind: 'helm-template', dir: resolve(dir) } : null
  }
  return renderer ?? undefined
}

export const HELM: Tool = {
  command: 'helm',
  usedBy: 'the Helm chart',
  install: 'Helm 3 on PATH (Homebrew: brew install helm; Debian has none: Helm\'s release binary), or HELM_TEMPLATE_DIR set to a helm-template renderer',
  present: () => chartRenderer() !== undefined
}

export const ALL_TOOLS: readonly Tool[] = [REDIS, PROMTOOL, SS, TINYPROXY, WRK, CURL, HELM]

/** Whether this run is CI's, where nothing may be skipped. */
export const IN_CI = !['', '0', 'false'].includes(process.env.CI ?? '')

/** The one line a test skipped for want of `tool` shows: what is missing, what for, what to install. */
export function missingLine (tool: Tool): string {
  return `no ${tool.command} (${tool.usedBy}): ${tool.install}`
}

/**
 * A test's `skip` option: false when `tool` is there; else the line naming what to install
 * (tap prints it once, as `# SKIP <line>`). Under CI it throws instead: nothing may skip there.
 */
export function skipUnless (tool: Tool): false | string {
  if (tool.present()) return false
  if (IN_CI) throw new Error(`CI: ${tool.command} is missing (${tool.usedBy}): ${tool.install}`)
  return missingLine(tool)
}

/**
 * For a file all of whose tests need `tool`: when it is missing (outside CI) the whole file
 * is reported skipped with one line, and nothing after this call runs.
 */
export function skipFileUnless (t: { plan: (n: number, comment: string) => void, end: () => void }, tool: Tool): void {
  const skip = skipUnless(tool)
  if (skip === false) return
  t.plan(0, skip)
  t.end()
  // The file's tests are registered after this: ending the process here keeps them from
  // running against a plan of none.
  process.exit(0)
}
