/**
 * The admin /metrics text read generically: every sample as `name{labels}` → value,
 * with labels sorted, so a test can compare counters by label set whatever labels
 * the code under test defines.
 */
export type Samples = Map<string, number>

const SAMPLE = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)/
const LABEL = /([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g

export function parseMetrics (text: string): Samples {
  const samples: Samples = new Map()
  for (const line of text.split('\n')) {
    if (line.startsWith('#')) continue
    const match = SAMPLE.exec(line)
    if (match === null) continue
    const labels: Record<string, string> = {}
    for (const [, name, value] of (match[2] ?? '').matchAll(LABEL)) labels[name ?? ''] = value ?? ''
    samples.set(seriesKey(match[1] ?? '', labels), Number(match[3]))
  }
  return samples
}

export function seriesKey (name: string, labels: Record<string, string>): string {
  const inner = Object.keys(labels).sort().map((k) => `${k}="${labels[k] ?? ''}"`).join(',')
  return `${name}{${inner}}`
}

/** How much each series of `name` grew between two scrapes (series that did not move are left out). */
export function delta (before: Samples, after: Samples, name: string): Map<string, number> {
  const out = new Map<string, number>()
  for (const [key, value] of after) {
    if (!key.startsWith(name + '{')) continue
    const grew = value - (before.get(key) ?? 0)
    if (grew !== 0) out.set(key, grew)
  }
  return out
}

export async function scrape (adminUrl: string): Promise<Samples> {
  const res = await fetch(adminUrl + '/metrics')
  return parseMetrics(await res.text())
}

/**
 * Scrapes once no proxied request is in flight any more (metrics are counted when
 * the caller's connection closes, a moment after the caller saw its answer). Throws,
 * saying what it waited for, if that does not happen within `timeoutMs`.
 */
export async function scrapeSettled (adminUrl: string, inFlight = 'store_auth_proxy_requests_in_flight', timeoutMs = 10_000): Promise<Samples> {
  const deadline = performance.now() + timeoutMs
  for (;;) {
    const samples = await scrape(adminUrl)
    const n = samples.get(seriesKey(inFlight, {})) ?? 0
    if (n === 0) return samples
    if (performance.now() > deadline) throw new Error(`${inFlight} still ${n} after ${timeoutMs} ms`)
    await new Promise((resolve) => setTimeout(resolve, 25))
  }
}

/** Expected counter growth, built from what the callers saw, in the same keys as `delta`. */
export function createTally () {
  const counts = new Map<string, number>()
  return {
    counts,
    add (name: string, labels: Record<string, string>, n = 1) {
      const key = seriesKey(name, labels)
      counts.set(key, (counts.get(key) ?? 0) + n)
    }
  }
}

/** Map → sorted plain object, so tap prints a readable diff. */
export function asObject (map: Map<string, number>): Record<string, number> {
  return Object.fromEntries([...map.entries()].sort(([a], [b]) => (a < b ? -1 : 1)))
}
