// The mutation areas (stryker/*.config.mjs) against the tree: every pattern still names a
// file; every test file the area's committed report was run with is still there (moved or
// deleted, its mutants must be re-tested and the report refreshed); and a mutated
// file's own test file (src/x/y.ts's test/x/y.test.ts) is among them. When src/ was grouped by
// concern, test/quota/redis-client.test.ts moved to test/redis/connection.test.ts, out of
// quota-fleet's patterns: its 17 mutants of src/redis/connection.ts survived, and only the
// next full run showed it.
import { existsSync, globSync, readdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { fileURLToPath, pathToFileURL } from 'node:url'
import t, { type Test } from 'tap'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

interface Area { mutate: string[], tap: { testFiles: string[] } }

// token-file.config.mjs is one token file against its own test, chosen by TOKEN_FILE: not an area.
const AREAS = readdirSync(join(ROOT, 'stryker')).filter((f) => f.endsWith('.config.mjs') && f !== 'token-file.config.mjs')

const matches = (pattern: string): string[] => globSync(pattern, { cwd: ROOT })

/** The test files the area's committed incremental report was run with; the report must exist. */
function reportedTests (t: Test, name: string): string[] {
  const report = join(ROOT, 'reports', 'mutation', `${name}.incremental.json`)
  if (!existsSync(report)) {
    t.fail(`${name} has a committed report to hold its tests to`)
    return []
  }
  return Object.keys((JSON.parse(readFileSync(report, 'utf8')) as { testFiles: Record<string, unknown> }).testFiles)
}

t.ok(AREAS.length >= 6, `the areas are read (${AREAS.join(', ')})`)

for (const file of AREAS) {
  t.test(file, async (t) => {
    const area = ((await import(pathToFileURL(join(ROOT, 'stryker', file)).href)) as { default: Area }).default
    const mutated = area.mutate.filter((p) => !p.startsWith('!'))
    for (const pattern of [...area.mutate.map((p) => p.replace(/^!/, '')), ...area.tap.testFiles]) {
      t.not(matches(pattern).length, 0, `${pattern} names a file`)
    }
    const tests = new Set(area.tap.testFiles.flatMap(matches))
    const reported = reportedTests(t, file.replace(/\.config\.mjs$/, ''))
    // A run records the odd file outside its patterns (the other quota area's, run beside it): only one gone is a loss.
    for (const test of reported) t.ok(tests.has(test) || existsSync(join(ROOT, test)), `${test}, in the committed report, is still there to run`)
    for (const source of mutated.flatMap(matches)) {
      const own = source.replace(/^src\//, 'test/').replace(/\.ts$/, '.test.ts')
      if (existsSync(join(ROOT, own))) t.ok(tests.has(own), `${source}'s own tests (${own}) are in the area`)
    }
  })
}
