// A token manager over a scripted token endpoint and a fake clock, for the token tests.
import type { Test } from 'tap'
import { createMetrics } from '../../src/metrics.js'
import { TokenRequestError, type FetchedToken } from '../../src/token/token-client.js'
import { createTokenManager, type TokenManagerOptions } from '../../src/token/token-manager.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { captureLogs } from '../helpers/logs.js'

export const HOUR = 3_600_000

export type Answer = { lifetimeMs: number, latencyMs?: number } | { error: TokenRequestError, latencyMs?: number } | 'hang'

/**
 * A token endpoint made of promises: each call takes the next scripted answer
 * (the last one repeats) and resolves after its latency on the fake clock.
 */
export function scriptedEndpoint (clock: ReturnType<typeof fakeClock>, answers: Answer[]) {
  let calls = 0
  const fetchToken = async (): Promise<FetchedToken> => {
    const answer = answers[Math.min(calls, answers.length - 1)]
    calls += 1
    const n = calls
    if (answer === undefined || answer === 'hang') return await new Promise<never>(() => {})
    if (answer.latencyMs !== undefined) await new Promise((resolve) => clock.fake.setTimeout(resolve, answer.latencyMs))
    if ('error' in answer) throw answer.error
    return { accessToken: `token-${n}`, lifetimeMs: answer.lifetimeMs, info: { application_name: 'demo-app', client_id: 'demo-client' } }
  }
  return { fetchToken, calls: () => calls }
}

export function manager (t: Test, answers: Answer[], options: Partial<TokenManagerOptions> = {}) {
  const clock = fakeClock()
  const endpoint = scriptedEndpoint(clock, answers)
  const logs = captureLogs()
  const tokens = createTokenManager({
    fetchToken: endpoint.fetchToken,
    log: logs.log,
    metrics: createMetrics({ defaultMetrics: false }),
    refreshMarginMs: 300_000,
    waitMs: 3000,
    clock: clock.clock,
    random: () => 0,
    ...options
  })
  t.teardown(() => { tokens.stop() })
  return { tokens, clock, endpoint, logs }
}

export const serverError = () => new TokenRequestError('server_error', 'token endpoint failed (500)', { statusCode: 500 })
