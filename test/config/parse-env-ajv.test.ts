// parseEnv with Ajv alone (no env-schema): what the environment becomes, and how a violation is thrown.
import t from 'tap'
import { parseEnv } from '../../src/config/parse-env.js'

const schema = {
  type: 'object',
  properties: {
    PORT: { type: 'integer', minimum: 0, maximum: 65535, default: 8080 },
    ACCESS_LOG: { type: 'boolean', default: false },
    NAME: { type: 'string' }
  }
} as const

t.test('only the schema\'s variables come out, typed, defaults filled in', async (t) => {
  t.same(parseEnv(schema, { PORT: '81', ACCESS_LOG: 'true', NAME: 'x', PATH: '/bin', HOME: '/root' }), { PORT: 81, ACCESS_LOG: true, NAME: 'x' })
  t.same(parseEnv(schema, {}), { PORT: 8080, ACCESS_LOG: false })
})

t.test('the environment given is not changed', async (t) => {
  const env = { PORT: '81', OTHER: 'y' }
  parseEnv(schema, env)
  t.same(env, { PORT: '81', OTHER: 'y' })
})

t.test('every violation at once, in an error that says what it is', async (t) => {
  const thrown = t.throws(() => parseEnv(schema, { PORT: 'eighty', ACCESS_LOG: 'yes' })) as Error & { errors?: Array<{ instancePath: string }> }
  t.equal(thrown.message, 'the environment does not match the schema')
  t.same(thrown.errors?.map((e) => e.instancePath), ['/PORT', '/ACCESS_LOG'])
})

t.test('each schema keeps its own validator', async (t) => {
  const other = { type: 'object', properties: { PORT: { type: 'integer', default: 1 } } } as const
  t.same(parseEnv(other, {}), { PORT: 1 })
  t.same(parseEnv(schema, {}), { PORT: 8080, ACCESS_LOG: false })
  t.same(parseEnv(other, { PORT: '2' }), { PORT: 2 })
})
