// Shortens each mutant's statusReason in an incremental report to its first 300 characters.
// A killed mutant's reason is its first failing assertion, whole: a test that checks
// thousands of rules at once made the quota-rules report 47 MB, 45 MB of it reasons. The
// incremental run reads a mutant's status and its tests, not the reason's length.
//
//   node stryker/trim-report.mjs reports/mutation/<area>.incremental.json
import { existsSync, readFileSync, writeFileSync } from 'node:fs'

const MAX = 300
const file = process.argv[2]
if (file === undefined) throw new Error('usage: node stryker/trim-report.mjs <incremental report>')
if (existsSync(file)) {
  const report = JSON.parse(readFileSync(file, 'utf8'))
  for (const { mutants } of Object.values(report.files)) {
    for (const m of mutants) {
      if (typeof m.statusReason === 'string' && m.statusReason.length > MAX) m.statusReason = m.statusReason.slice(0, MAX) + '…'
    }
  }
  writeFileSync(file, JSON.stringify(report))
}
