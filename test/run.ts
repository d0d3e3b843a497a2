// `npm test`'s last step: tap, after one line for each program the tests need that is not
// installed (test/helpers/tools.ts; their tests are skipped, each with the same line). The
// coverage floors of .taprc hold only when nothing is skipped so: code whose tests were
// skipped would count as untested. Under CI (CI=true) a missing program fails the run.
// Arguments go to tap (`npm test -- test/cli/main.test.ts`).
import { spawnSync } from 'node:child_process'
import { ALL_TOOLS, IN_CI, missingLine } from './helpers/tools.js'

const missing = ALL_TOOLS.filter((tool) => !tool.present())
if (missing.length > 0 && IN_CI) {
  process.stderr.write(missing.map((tool) => `CI: ${missingLine(tool)}; nothing may be skipped under CI\n`).join(''))
  process.exit(1)
}
const lines = missing.map((tool) => `skipped: ${missingLine(tool)}`)
process.stdout.write(lines.map((line) => `${line}\n`).join(''))
if (missing.length > 0) process.stdout.write('skipped: so the coverage floors of .taprc are not enforced in this run\n')

// `npm test` puts node_modules/.bin on PATH.
const tap = spawnSync('tap', [...(missing.length === 0 ? ['--no-allow-incomplete-coverage'] : []), ...process.argv.slice(2)], { stdio: 'inherit' })
if (tap.error !== undefined) throw tap.error
// Again at the end, where a reader of the run looks first.
process.stdout.write(lines.map((line) => `${line}\n`).join(''))
process.exitCode = tap.status ?? 1
