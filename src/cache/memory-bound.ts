// The read cache's bound against the memory limit: its copies are live memory beside the rest
// of the sidecar, under the overload manager's waters. CACHE_MAX_BYTES, or CACHE_WATER of a
// limit too small for it (overload/waters.ts): a full cache must never make the sidecar shed
// its callers. Said at start and by check-config when CACHE_MAX_BYTES does not fit.
import type { Config } from '../config/load.js'
import { CACHE_WATER, cacheBound } from '../overload/waters.js'

export { cacheBound }

/** A warning when a rule has cache= and CACHE_MAX_BYTES does not fit in the memory limit (`limitBytes`, 0: none known). */
export function cacheBoundWarnings (config: { readonly rateLimits: Pick<Config['rateLimits'], 'rules'>, readonly cache: Pick<Config['cache'], 'maxBytes'> }, limitBytes: number): string[] {
  const { maxBytes } = config.cache
  const bound = cacheBound(limitBytes, maxBytes)
  if (bound >= maxBytes || !config.rateLimits.rules.some((rule) => rule.cache !== undefined)) return []
  return [
    `CACHE_MAX_BYTES (${maxBytes}) does not fit in the memory limit (${limitBytes} bytes) beside the rest of the sidecar: ` +
    `the read cache keeps at most ${bound} bytes (${CACHE_WATER * 100} % of the limit). ` +
    `Raise the limit to ${Math.ceil(maxBytes / CACHE_WATER)} bytes, or lower CACHE_MAX_BYTES`
  ]
}
