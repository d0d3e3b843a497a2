import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'

const made: string[] = []
process.once('exit', () => { for (const dir of made) rmSync(dir, { recursive: true, force: true }) })

/** A fresh directory under the system's temp dir, removed when the test process exits. */
export function tempDir (prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix))
  made.push(dir)
  return dir
}
