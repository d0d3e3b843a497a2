// Reads a V8 .cpuprofile (node --cpu-prof) and says where the time went:
// self time by package, the top functions by self time, and the top functions
// by inclusive time (themselves and what they call). Idle time is left out of
// the percentages: they are shares of the time the process was busy.
//
//   node dist/bench/profile.js FILE.cpuprofile [--top N] [--match REGEX]
//     --match keeps only functions whose name or location matches, in the inclusive table
import { readFileSync } from 'node:fs'

interface CallFrame { functionName: string, url: string, lineNumber: number, columnNumber: number }
interface ProfileNode { id: number, callFrame: CallFrame, children?: number[] }
interface Profile { nodes: ProfileNode[], samples: number[], timeDeltas: number[], startTime: number, endTime: number }

const args = process.argv.slice(2)
const file = args.find((a) => !a.startsWith('--'))
if (file === undefined) {
  process.stderr.write('usage: node dist/bench/profile.js FILE.cpuprofile [--top N] [--match REGEX]\n')
  process.exit(2)
}
const topIndex = args.indexOf('--top')
const TOP = topIndex === -1 ? 25 : Number(args[topIndex + 1])
const matchIndex = args.indexOf('--match')
const MATCH = matchIndex === -1 ? undefined : new RegExp(args[matchIndex + 1] ?? '.')

const profile = JSON.parse(readFileSync(file, 'utf8')) as Profile
const byId = new Map<number, ProfileNode>()
const parent = new Map<number, number>()
for (const node of profile.nodes) {
  byId.set(node.id, node)
  for (const child of node.children ?? []) parent.set(child, node.id)
}

/** The package a frame belongs to: an npm package, node core, this project, or a V8 pseudo-frame. */
export function packageOf (frame: CallFrame): string {
  const { url, functionName } = frame
  if (url === '') {
    if (functionName === '(garbage collector)') return '(garbage collector)'
    if (functionName === '(program)') return '(program: native, VM)'
    if (functionName === '(idle)') return '(idle)'
    if (functionName === '(root)') return '(root)'
    return '(native / V8 builtins)'
  }
  if (url.startsWith('node:')) return 'node core'
  const nm = url.lastIndexOf('/node_modules/')
  if (nm !== -1) {
    const rest = url.slice(nm + '/node_modules/'.length).split('/')
    return rest[0]?.startsWith('@') === true ? `${rest[0]}/${rest[1] ?? ''}` : (rest[0] ?? url)
  }
  if (url.includes('/dist/')) return 'store-auth-proxy'
  return url
}

function location (frame: CallFrame): string {
  const url = frame.url
  const nm = url.lastIndexOf('/node_modules/')
  const short = nm !== -1 ? url.slice(nm + '/node_modules/'.length) : url.includes('/dist/') ? url.slice(url.lastIndexOf('/dist/') + 1) : url
  return short === '' ? '' : `${short}:${frame.lineNumber + 1}`
}

const functionKey = (frame: CallFrame): string => `${frame.functionName || '(anonymous)'}\t${location(frame)}`

// Each sample lasts until the next one (as Chrome DevTools counts it).
const durations = profile.timeDeltas.slice(1).concat([0])
const self = new Map<string, number>()
const selfByPackage = new Map<string, number>()
const inclusive = new Map<string, number>()
const keyPackage = new Map<string, string>()
let busy = 0
let idle = 0
for (let i = 0; i < profile.samples.length; i++) {
  const id = profile.samples[i] as number
  const us = durations[i] ?? 0
  const node = byId.get(id)
  if (node === undefined) continue
  const pkg = packageOf(node.callFrame)
  if (pkg === '(idle)') { idle += us; continue }
  busy += us
  const key = functionKey(node.callFrame)
  keyPackage.set(key, pkg)
  self.set(key, (self.get(key) ?? 0) + us)
  selfByPackage.set(pkg, (selfByPackage.get(pkg) ?? 0) + us)
  // Inclusive: every distinct function on the stack, once per sample.
  const seen = new Set<string>()
  for (let n: number | undefined = id; n !== undefined; n = parent.get(n)) {
    const frame = byId.get(n)?.callFrame
    if (frame === undefined || frame.functionName === '(root)') continue
    const k = functionKey(frame)
    if (seen.has(k)) continue
    seen.add(k)
    keyPackage.set(k, packageOf(frame))
    inclusive.set(k, (inclusive.get(k) ?? 0) + us)
  }
}

const pct = (us: number): string => `${(us / busy * 100).toFixed(1)} %`
const ms = (us: number): string => (us / 1000).toFixed(0)
const out: string[] = []
out.push(`profile: ${file}`)
out.push(`wall ${ms(profile.endTime - profile.startTime)} ms, busy ${ms(busy)} ms, idle ${ms(idle)} ms; percentages are of busy time`)
out.push('')
out.push('| package | self ms | self % |')
out.push('|---|---|---|')
for (const [pkg, us] of [...selfByPackage].sort((a, b) => b[1] - a[1])) out.push(`| ${pkg} | ${ms(us)} | ${pct(us)} |`)
out.push('')
out.push(`top ${TOP} functions by self time`)
out.push('')
out.push('| function | package | location | self ms | self % |')
out.push('|---|---|---|---|---|')
for (const [key, us] of [...self].sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
  const [name, loc] = key.split('\t')
  out.push(`| ${name ?? ''} | ${keyPackage.get(key) ?? ''} | ${loc ?? ''} | ${ms(us)} | ${pct(us)} |`)
}
out.push('')
out.push(`top ${TOP} functions by inclusive time${MATCH === undefined ? '' : ` matching ${String(MATCH)}`}`)
out.push('')
out.push('| function | package | location | inclusive ms | inclusive % |')
out.push('|---|---|---|---|---|')
const inclusiveRows = [...inclusive].filter(([key]) => MATCH === undefined || MATCH.test(key) || MATCH.test(keyPackage.get(key) ?? ''))
for (const [key, us] of inclusiveRows.sort((a, b) => b[1] - a[1]).slice(0, TOP)) {
  const [name, loc] = key.split('\t')
  out.push(`| ${name ?? ''} | ${keyPackage.get(key) ?? ''} | ${loc ?? ''} | ${ms(us)} | ${pct(us)} |`)
}
process.stdout.write(out.join('\n') + '\n')
