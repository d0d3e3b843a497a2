import { readFileSync } from 'node:fs'

/**
 * The one source of truth for what is running, for `--version`, the start-up log line
 * and the `store_auth_proxy_build_info` metric:
 *
 * - version: package.json's `version` (the image copies package.json next to dist/);
 * - revision: the first line of a `REVISION` file next to this module (`dist/REVISION`),
 *   written at build time (the Dockerfile writes its `REVISION` build argument there;
 *   from a checkout: `git rev-parse HEAD > dist/REVISION` after `npm run build`), or
 *   `unknown`. Nothing runs git at run time: the image has no git and no .git;
 * - node: the running Node.js version.
 *
 * Read once, on first use, so that importing this module does nothing.
 */
export interface BuildInfo {
  readonly version: string
  readonly revision: string
  readonly node: string
}

export const UNKNOWN = 'unknown'
const PACKAGE_NAME = 'store-auth-proxy'

let cached: BuildInfo | undefined

export function buildInfo (): BuildInfo {
  cached ??= Object.freeze({ version: readVersion(), revision: readRevision(), node: process.version })
  return cached
}

function readText (relative: string): string | undefined {
  try {
    return readFileSync(new URL(relative, import.meta.url), 'utf8')
  } catch {
    return undefined
  }
}

// dist/config/build-info.js and src/config/build-info.ts sit two levels below package.json;
// the image writes its revision to dist/REVISION.
function readVersion (): string {
  const text = readText('../../package.json')
  if (text === undefined) return UNKNOWN
  try {
    const manifest = JSON.parse(text) as { name?: unknown, version?: unknown }
    if (manifest.name === PACKAGE_NAME && typeof manifest.version === 'string') return manifest.version
  } catch {}
  return UNKNOWN
}

/** A revision is a label value and a log field: one short line of safe characters. */
export function parseRevision (text: string | undefined): string {
  const line = text?.split('\n', 1)[0]?.trim() ?? ''
  return /^[\w.+-]{1,64}$/.test(line) ? line : UNKNOWN
}

function readRevision (): string {
  return parseRevision(readText('../REVISION'))
}
