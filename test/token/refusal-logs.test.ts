// What an operator reads while our credentials are refused, by the token endpoint or by the
// egress proxy, and once they are accepted again: which lines, at which level, with which fields.
import t, { type Test } from 'tap'
import { TokenRequestError } from '../../src/token/token-client.js'
import { HOUR, manager, type Answer } from './scripted-manager.js'

const TOKEN_URL = 'https://transact.example/v1/oauth/accesstoken'
const RETRY_MS = 1000
const rejected = (): Answer => ({ error: new TokenRequestError('rejected', 'token endpoint rejected the client credentials (401) (invalid_client)', { statusCode: 401, oauthError: 'invalid_client' }) })
const proxyRefused = (): Answer => ({ error: new TokenRequestError('proxy_rejected', 'egress proxy refused our credentials (407)') })
const token: Answer = { lifetimeMs: HOUR }

/** Runs the answers up to the first token: the quick retry after 1 ms (random 0), each refusal after it RETRY_MS. */
async function run (t: Test, answers: Answer[]) {
  const m = manager(t, answers, { tokenUrl: TOKEN_URL, rejectedRetryMs: RETRY_MS, forcedRefreshIntervalMs: 0 })
  await m.tokens.start()
  await m.clock.tick(answers.length * RETRY_MS)
  const at = (level: number) => m.logs.entries().filter((e) => e.level === level)
  return { ...m, at }
}

const againLines = (entries: Array<Record<string, unknown>>) => entries.map((e) => e.msg).filter((msg) => /accepts .* again$/.test(String(msg)))

t.test('the first refusal is a WARN with what was refused and when the quick retry runs', async (t) => {
  const endpoint = await run(t, [rejected(), token])
  t.match(endpoint.at(40), [{ url: TOKEN_URL, oauthError: 'invalid_client', statusCode: 401, credentials: ['CLIENT_ID', 'CLIENT_SECRET'], retryInMs: 1 }])
  t.match(endpoint.at(40)[0]?.msg, /^token endpoint rejected the client credentials; retrying once/)
  const proxy = await run(t, [proxyRefused(), token])
  t.match(proxy.at(40), [{ url: TOKEN_URL, reason: 'egress proxy refused our credentials (407)', retryInMs: 1 }])
  t.match(proxy.at(40)[0]?.msg, /^egress proxy refused our credentials; retrying once/)
  t.same([endpoint.at(50), proxy.at(50)], [[], []], 'no ERROR: the quick retry succeeded')
  t.same([againLines(endpoint.at(30)), againLines(proxy.at(30))], [[], []], 'nor an "again": no incident was declared')
})

t.test('after the one ERROR of an incident, each further refusal is a debug line', async (t) => {
  const { at } = await run(t, [rejected(), rejected(), rejected(), rejected(), token])
  t.equal(at(50).length, 1)
  t.match(at(20).filter((e) => e.msg === 'credentials still refused'), [
    { outcome: 'rejected', oauthError: 'invalid_client', retryInMs: RETRY_MS },
    { outcome: 'rejected', oauthError: 'invalid_client', retryInMs: RETRY_MS }
  ], 'the third and fourth refusals')
})

t.test('"accepts again" is said once a token arrives, only by whoever refused', async (t) => {
  const endpoint = await run(t, [rejected(), rejected(), token])
  t.same(againLines(endpoint.at(30)), ['token endpoint accepts the client credentials again'])
  const proxy = await run(t, [proxyRefused(), proxyRefused(), token])
  t.same(againLines(proxy.at(30)), ['egress proxy accepts our credentials again'])
  const both = await run(t, [rejected(), proxyRefused(), rejected(), token])
  t.same(againLines(both.at(30)), ['token endpoint accepts the client credentials again', 'egress proxy accepts our credentials again'])
})

t.test('a token ends the incident: the next refusals are a new one, with their own quick retry and ERROR, and nothing is said "again" twice', async (t) => {
  for (const [kind, refusal] of [['endpoint', rejected], ['proxy', proxyRefused]] as const) {
    const { tokens, clock, at } = await run(t, [refusal(), refusal(), token, refusal(), refusal(), token])
    t.equal(at(50).length, 1, `${kind}: one ERROR so far`)
    // The held token's refresh: the next run of answers.
    const held = tokens.current()
    if (held === undefined) throw new Error('no token')
    t.equal(tokens.invalidate(held.generation), true)
    await clock.tick(3 * RETRY_MS)
    t.equal(at(50).length, 2, 'a second incident, a second ERROR')
    t.equal(againLines(at(30)).length, 2, 'one "again" per incident')
  }
})
