// A fleet fetch on a fake clock over claims a test scripts method by method (the rest answer as
// a Redis with nothing in it would): every call to them recorded in order, every failure heard.
import { EventEmitter } from 'node:events'
import { createFleetFetch, type FleetClaims } from '../../src/cache/fleet-fetch.js'
import type { CacheKey } from '../../src/cache/policy.js'
import { fakeClock } from '../helpers/fake-clock.js'

/** How long a request waits for another sidecar's fetch, here. */
export const FILL_MS = 2_000

export const cacheKeyOf = (id: string): CacheKey => ({ id, uri: id, display: `/${id}` })

export function scriptedFleet (script: Partial<FleetClaims>) {
  const clock = fakeClock()
  const calls: string[] = []
  const errors: string[] = []
  const said: FleetClaims = {
    claim: async () => ({ kind: 'claimed' }),
    renew: async () => {},
    release: async () => {},
    look: async () => ({ stored: false, held: 'none' }),
    ...script
  }
  const claims: FleetClaims = {
    claim: (id, value, knownLeftMs) => { calls.push(`claim ${id}`); return said.claim(id, value, knownLeftMs) },
    renew: (id, value) => { calls.push(`renew ${id}`); return said.renew(id, value) },
    release: (id, value, failure) => { calls.push(`release ${id}`); return said.release(id, value, failure) },
    look: (id, knownLeftMs) => { calls.push(`look ${id}`); return said.look(id, knownLeftMs) }
  }
  const fleet = createFleetFetch({
    claims,
    clock: clock.clock,
    fillMs: FILL_MS,
    find: async () => ({ entry: undefined }),
    failed: (_err, what) => { errors.push(what) }
  })
  const caller = Object.assign(new EventEmitter(), { destroyed: false })
  return { clock, calls, errors, fleet, caller }
}

/** Lets every promise callback already due run (a real turn of the event loop; the fake clock is not moved). */
export const settled = (): Promise<void> => new Promise((resolve) => { setImmediate(resolve) })
