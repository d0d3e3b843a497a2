import { readFileSync } from 'node:fs'
import { join } from 'node:path'

/**
 * The node flags the sidecar ships with, read from `npm start` in DIR's package.json
 * (`node --max-semi-space-size=4 dist/main.js`). The image's ENTRYPOINT carries the same
 * flags (test/deploy/compose.test.ts checks), so the benchmark and the soak run the
 * sidecar as it runs in production.
 */
export function shippedNodeFlags (dir: string): string[] {
  const manifest = JSON.parse(readFileSync(join(dir, 'package.json'), 'utf8')) as { scripts?: { start?: string } }
  const start = manifest.scripts?.start ?? ''
  const match = /^node((?:\s+--[\w-]+(?:=\S+)?)*)\s+dist\/main\.js$/.exec(start)
  if (match === null) throw new Error(`${dir}/package.json: "start" is not "node [--flags] dist/main.js": ${start}`)
  return (match[1] ?? '').split(/\s+/).filter((flag) => flag !== '')
}
