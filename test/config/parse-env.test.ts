// parseEnv types only the environment it is given, and schema violations become messages that
// name the variable (not its JSON pointer) and what is allowed, never the value.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { parseEnv, parseEnvOrThrow, schemaProblems } from '../../src/config/parse-env.js'
import { MAX_DURATION_MS, schema } from '../../src/config/schema.js'
import { problemsOf } from './problems.js'

const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test/store', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }

// env-schema's `env: true` (its default) would merge process.env under the data, and
// `dotenv: true` a .env file from the working directory: main.ts passes process.env itself,
// and a test, check-config or the demo commands must see only the environment they are given.
t.test('neither process.env nor a .env file in the working directory is read', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'parse-env-'))
  const cwd = process.cwd()
  const saved = process.env.PORT
  t.teardown(() => {
    process.chdir(cwd)
    if (saved === undefined) delete process.env.PORT
    else process.env.PORT = saved
    rmSync(dir, { recursive: true, force: true })
  })
  writeFileSync(join(dir, '.env'), 'PORT=18080\nADMIN_PORT=19090\n')
  process.chdir(dir)
  process.env.PORT = '28080'
  const env = parseEnv(schema, base)
  t.equal(env.PORT, 8080)
  t.equal(env.ADMIN_PORT, 9090)
  t.equal(loadConfig(base, () => '').listener.port, 8080)
})

t.test('schema violations: the variable, the constraint and what is allowed, word for word', async (t) => {
  const cases: Array<[Record<string, string>, string]> = [
    [{ PORT: '70000' }, 'PORT: must be at most 65535'],
    [{ TOKEN_TIMEOUT_MS: '0' }, 'TOKEN_TIMEOUT_MS: must be at least 1'],
    [{ ADMIN_PORT: 'nine' }, 'ADMIN_PORT: must be a port number, in digits (0 to 65535)'],
    // Only a duration's one-day ceiling explains itself.
    [{ TOKEN_TIMEOUT_MS: String(MAX_DURATION_MS + 1) }, "TOKEN_TIMEOUT_MS: must be at most 86400000 (one day: Node's timers overflow above 2147483647 ms)"],
    [{ LOG_LEVEL: 'verbose' }, 'LOG_LEVEL: must be one of fatal, error, warn, info, debug, trace, silent']
  ]
  for (const [env, problem] of cases) t.same(problemsOf(() => loadConfig({ ...base, ...env }, () => '')), [problem], problem)
  // The note is about the upper bound: a lower bound of one day (a schema of its own) says only that.
  const atLeastOneDay = { type: 'object', properties: { WINDOW_MS: { type: 'integer', minimum: MAX_DURATION_MS } } } as const
  t.same(problemsOf(() => parseEnvOrThrow(atLeastOneDay, { WINDOW_MS: '1' })), ['WINDOW_MS: must be at least 86400000'])
})

t.test('an error that is not a schema violation keeps its message; a violation without one is "is invalid"', async (t) => {
  t.same(schemaProblems(new Error('cannot read .env (EACCES)')), ['cannot read .env (EACCES)'])
  t.same(schemaProblems({ errors: [{ instancePath: '/PORT', keyword: 'format', params: {} }] }), ['PORT: is invalid'])
})
