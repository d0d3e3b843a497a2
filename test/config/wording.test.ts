// Every schema violation in words an operator can act on: what the variable takes, the
// spellings accepted, the unit and an example; never Ajv's own text, never the value.
import t from 'tap'
import { loadConfig } from '../../src/config/load.js'
import { schemaProblems } from '../../src/config/parse-env.js'
import { problemsOf } from './problems.js'

const base = { AUTH_URL: 'https://auth.example.test', UPSTREAM_URL: 'https://api.example.test', CLIENT_ID: 'id', CLIENT_SECRET: 'secret' }

t.test('each kind of mistake, on the sidecar\'s own variables', async (t) => {
  const cases: Array<[Record<string, string>, string]> = [
    [{ ACCESS_LOG: 'yes' }, 'ACCESS_LOG: must be true or false (in lower case; not 1, 0, yes or no)'],
    [{ STATUS_ENDPOINT: 'TRUE' }, 'STATUS_ENDPOINT: must be true or false (in lower case; not 1, 0, yes or no)'],
    [{ TOKEN_WAIT_MS: '3s' }, 'TOKEN_WAIT_MS: must be a whole number of milliseconds, in digits (30000 is 30 s)'],
    [{ MAX_BODY_BYTES: '1MiB' }, 'MAX_BODY_BYTES: must be a whole number of bytes, in digits (1048576 is 1 MiB)'],
    [{ ADMIN_PORT: 'http' }, 'ADMIN_PORT: must be a port number, in digits (0 to 65535)'],
    [{ UPSTREAM_QUEUE_LIMIT: 'many' }, 'UPSTREAM_QUEUE_LIMIT: must be a whole number, in digits'],
    [{ MAX_CONNECTIONS: '-1' }, 'MAX_CONNECTIONS: must be at least 0'],
    [{ PORT: '65536' }, 'PORT: must be at most 65535'],
    [{ SHUTDOWN_GRACE_MS: '86400001' }, "SHUTDOWN_GRACE_MS: must be at most 86400000 (one day: Node's timers overflow above 2147483647 ms)"],
    [{ LOG_FORMAT: 'colour' }, 'LOG_FORMAT: must be one of auto, json, pretty'],
    [{ HOST: '' }, 'HOST: must not be empty']
  ]
  for (const [env, problem] of cases) t.same(problemsOf(() => loadConfig({ ...base, ...env }, () => '')), [problem], problem)
})

t.test('a keyword with no wording of its own keeps Ajv\'s message; none at all is "is invalid"', async (t) => {
  t.same(schemaProblems({ errors: [{ instancePath: '/X', keyword: 'pattern', message: 'must match pattern "^a"', params: {} }] }), ['X: must match pattern "^a"'])
  t.same(schemaProblems({ errors: [{ instancePath: '/X', keyword: 'pattern', params: {} }] }), ['X: is invalid'])
})

t.test('the value is never in the message', async (t) => {
  const secretish = 'Sup3r-s3cret-in-the-wrong-variable'
  const problems = problemsOf(() => loadConfig({ ...base, PORT: secretish, ACCESS_LOG: secretish, LOG_LEVEL: secretish }, () => ''))
  t.equal(problems.length, 3)
  t.notMatch(problems.join('\n'), secretish)
})
