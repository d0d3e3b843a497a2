// TI's answer as the read cache keeps it (an entry) and as it sends it again to a caller.
import type { ServerResponse } from 'node:http'
import { ownBytes, standing, type Entry } from './entries.js'
import { cacheStatus, withUpstream, type CacheKey, type Decision, type StatusParams } from './policy.js'

type Headers = Record<string, string | string[] | undefined>

/** TI's answer as an entry of `key` under `rule`, with the lifetimes `decision` gives it; its own Age is left out (served anew). */
export function entryOf (key: CacheKey, rule: string, decision: Extract<Decision, { store: true }>,
  answer: { statusCode: number, headers: Headers, body: Buffer }, storedAt: number): Entry {
  const headers: Record<string, string | string[]> = {}
  for (const [name, value] of Object.entries(answer.headers)) if (value !== undefined && name !== 'age') headers[name] = value
  return {
    status: answer.statusCode,
    headers,
    body: ownBytes(answer.body),
    freshMs: decision.freshMs,
    staleMs: decision.staleMs,
    initialAgeMs: decision.initialAgeMs,
    vary: decision.vary,
    rule,
    display: key.display,
    uri: key.uri,
    storedAt
  }
}

/** Answers from `entry` at `now`: its status, TI's headers with Age and Cache-Status, and its body (none for HEAD). */
export function sendEntry (res: ServerResponse, entry: Entry, method: string, params: StatusParams, now: number): void {
  const { ageMs, ttlMs } = standing(entry, now)
  const headers = {
    ...entry.headers,
    age: String(Math.floor(ageMs / 1000)),
    'cache-status': withUpstream(cacheStatus({ ...params, ttlSeconds: Math.round(ttlMs / 1000) }), entry.headers['cache-status']),
    'content-length': String(entry.body.length)
  }
  try {
    res.writeHead(entry.status, headers)
  } catch (err) {
    res.destroy(err as Error)
    return
  }
  res.end(method === 'HEAD' ? undefined : entry.body)
}
