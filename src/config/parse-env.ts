import { createRequire } from 'node:module'
import type EnvSchema from 'env-schema'
import { readSecretFileSync, SecretFileError } from './secret-file.js'
import { MAX_DURATION_MS, NODE_TIMER_MAX_MS, type EnvOf } from './schema.js'

export type Env = Record<string, string | undefined>

/** Reads a file named by a `*_FILE` variable at start; config checks take it as a parameter for tests. */
export type ReadFileSync = (path: string) => string

// Regular files only, size-capped, never blocking on a FIFO (src/config/secret-file.ts).
export const defaultReadFileSync: ReadFileSync = readSecretFileSync

/** Every problem found in one configuration, in one error; no message ever holds a credential. */
export class ConfigError extends Error {
  readonly problems: readonly string[]
  constructor (problems: string[]) {
    super('invalid configuration:\n' + problems.map((p) => `  - ${p}`).join('\n'))
    // Stryker disable next-line StringLiteral: shows only in a stack trace; operators see the message (src/cli/exit.ts)
    this.name = 'ConfigError'
    this.problems = problems
  }
}

// env-schema compiles Ajv's meta-schema as it loads (some 50 ms): it is loaded on first
// use, so that `main.js healthcheck`, which container runtimes run every few seconds,
// does not pay for it.
const require = createRequire(import.meta.url)
let loadedEnvSchema: typeof EnvSchema | undefined

/** Types and defaults `env` by `schema`; throws env-schema's error (see schemaProblems). */
export function parseEnv<S extends object> (schema: S, env: Env): EnvOf<S> {
  loadedEnvSchema ??= require('env-schema') as typeof EnvSchema
  return loadedEnvSchema<EnvOf<S>>({ schema: structuredClone(schema) as object, data: { ...env }, env: false, dotenv: false })
}

/** Like parseEnv, but a schema violation becomes a ConfigError. */
export function parseEnvOrThrow<S extends object> (schema: S, env: Env): EnvOf<S> {
  try {
    return parseEnv(schema, env)
  } catch (err) {
    throw new ConfigError(schemaProblems(err))
  }
}

interface AjvError { instancePath: string, keyword?: string, message?: string, params: Record<string, unknown> }

export function schemaProblems (err: unknown): string[] {
  const errors = (err as { errors?: AjvError[] }).errors
  if (!Array.isArray(errors)) return [String((err as Error).message)]
  // Ajv messages name the constraint, never the value, so no secret can leak here.
  return errors.map((e) => {
    // Stryker disable next-line Regex: equivalent: an instance path here is `/NAME`, and a `/` inside a name would be escaped as `~1`
    const name = e.instancePath.replace(/^\//, '')
    const allowed = Array.isArray(e.params.allowedValues) ? ` (${e.params.allowedValues.join(', ')})` : ''
    const why = e.keyword === 'maximum' && e.params.limit === MAX_DURATION_MS
      ? ` (one day: Node's timers overflow above ${NODE_TIMER_MAX_MS} ms)`
      : ''
    return `${name}: ${e.message ?? 'is invalid'}${allowed}${why}`
  })
}

/** How a file named by a `*_FILE` variable failed to read, never its content. */
export function unreadable (variable: string, path: string, err: unknown): string {
  return err instanceof SecretFileError
    ? `${variable}: ${err.message}`
    : `${variable}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'})`
}
