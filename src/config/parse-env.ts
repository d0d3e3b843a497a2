import { createRequire } from 'node:module'
import type { Ajv, ValidateFunction } from 'ajv'
import { readSecretFileSync, SecretFileError } from './secret-file.js'
import { MAX_ALONE_MS, MAX_DURATION_MS, NODE_TIMER_MAX_MS, type EnvOf } from './schema.js'

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

// Ajv with env-schema's options (which typed the environment before): env-schema also compiles
// Ajv's meta-schema and a schema of its own options as it loads, 50 ms of every start and some
// 3 MiB held for good (docs/performance.md). Loaded on first use, so that `main.js healthcheck`,
// which container runtimes run every few seconds, does not pay for it; each schema is compiled
// once.
const require = createRequire(import.meta.url)
let ajv: Ajv | undefined
const compiled = new WeakMap<object, ValidateFunction>()

function validatorFor (schema: object): ValidateFunction {
  const known = compiled.get(schema)
  if (known !== undefined) return known
  ajv ??= new (require('ajv') as { Ajv: typeof Ajv }).Ajv({
    allErrors: true,
    // Only the schema's variables come out; defaults filled in, strings made numbers and booleans.
    removeAdditional: true,
    useDefaults: true,
    coerceTypes: true,
    // Stryker disable next-line BooleanLiteral: equivalent for these schemas (none has a union type; Ajv would only warn)
    allowUnionTypes: true,
    addUsedSchema: false,
    // The schemas are this project's own: Ajv's strict mode still refuses an unknown keyword.
    validateSchema: false
  })
  const validate = ajv.compile({ ...schema, additionalProperties: false })
  // Stryker disable next-line CallExpression: equivalent: the cache saves compiling a schema again, time only (test: parse-env-ajv's "each schema keeps its own validator")
  compiled.set(schema, validate)
  return validate
}

/**
 * A whole number as written: decimal digits (a minus sign, for a bound to say no), blanks
 * around them as Ajv allows. Ajv's coercion alone also takes ' ' (as 0), '0x10', '1e3', '+5'.
 */
const WHOLE_NUMBER = /^\s*-?\d+\s*$/

/** Types and defaults `env` by `schema`; throws an error carrying Ajv's errors (see schemaProblems). */
export function parseEnv<S extends object> (schema: S, env: Env): EnvOf<S> {
  const data: Record<string, unknown> = { ...env }
  const properties = (schema as { properties?: Record<string, { type?: unknown }> }).properties ?? {}
  for (const [name, value] of Object.entries(data)) {
    // NaN is no number Ajv coerces: its error ('type', "in digits") comes in the schema's order.
    if (properties[name]?.type === 'integer' && typeof value === 'string' && !WHOLE_NUMBER.test(value)) data[name] = Number.NaN
  }
  const validate = validatorFor(schema)
  if (!validate(data)) throw Object.assign(new Error('the environment does not match the schema'), { errors: validate.errors })
  return data as EnvOf<S>
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
  // Said in words an operator can act on, never Ajv's ("must be integer"), and never the
  // value: it may be a secret set in the wrong variable.
  return errors.map((e) => {
    // Stryker disable next-line Regex: equivalent: an instance path here is `/NAME`, and a `/` inside a name would be escaped as `~1`
    const name = e.instancePath.replace(/^\//, '')
    return `${name}: ${violation(name, e)}`
  })
}

/** What a whole number of this variable counts, from its name's unit, with an example. */
function wholeNumber (name: string): string {
  if (name.endsWith('_MS')) return 'a whole number of milliseconds, in digits (30000 is 30 s)'
  if (name.endsWith('_BYTES')) return 'a whole number of bytes, in digits (1048576 is 1 MiB)'
  if (name.endsWith('PORT')) return 'a port number, in digits (0 to 65535)'
  return 'a whole number, in digits'
}

/** Why a maximum is what it is, where the number alone does not say. */
const MAXIMUM_REASONS = new Map<number, string>([
  [MAX_DURATION_MS, ` (one day: Node's timers overflow above ${NODE_TIMER_MAX_MS} ms)`],
  [MAX_ALONE_MS, ' (30 days: it is no timer, but longer holds a dead sidecar\'s share as good as for ever; 0 turns the bound off)']
])

function violation (name: string, e: AjvError): string {
  const { limit, allowedValues, type } = e.params
  switch (e.keyword) {
    case 'type':
      return type === 'boolean' ? 'must be true or false (in lower case; not 1, 0, yes or no)' : `must be ${wholeNumber(name)}`
    case 'minimum':
      return `must be at least ${String(limit)}`
    case 'maximum':
      return `must be at most ${String(limit)}${MAXIMUM_REASONS.get(limit as number) ?? ''}`
    case 'enum':
      return `must be one of ${(allowedValues as string[]).join(', ')}`
    case 'minLength':
      return 'must not be empty'
    default:
      return e.message ?? 'is invalid'
  }
}

/** How a file named by a `*_FILE` variable failed to read, never its content. */
export function unreadable (variable: string, path: string, err: unknown): string {
  return err instanceof SecretFileError
    ? `${variable}: ${err.message}`
    : `${variable}: cannot read ${path} (${(err as NodeJS.ErrnoException).code ?? 'error'})`
}
