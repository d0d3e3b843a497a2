// What the memory limit cannot hold of a valid configuration: said at start (a warning in the
// log) and by check-config (on stderr), so the operator hears it before a flood does.
import { ADMIN_MAX_HEADER_BYTES, ADMIN_MAX_HEADER_COUNT } from '../admin/server.js'
import { memoryLimitWarnings, type MemoryLimit } from './memory-limit.js'
import { headCost, headsFit, IDLE_PRIVATE_BYTES } from './waters.js'

/**
 * The admin listener's unfinished heads take at most this fraction of the limit: beside the
 * proxy port's (HEADS_WATER with an idle sidecar), under CONNECTION_WATER (waters.ts).
 */
export const ADMIN_HEADS_WATER = 0.1

/** What ADMIN_MAX_CONNECTIONS unfinished admin heads hold: Node bounds them by the admin's own header limits. */
export function adminHeadsBytes (maxConnections: number): number {
  return maxConnections * headCost(ADMIN_MAX_HEADER_BYTES, ADMIN_MAX_HEADER_COUNT)
}

export interface LimitSettings {
  readonly listener: { readonly maxHeaderBytes: number, readonly maxHeaderCount: number }
  readonly overload: { readonly maxConnections: number }
  readonly admin: { readonly maxConnections: number }
}

/** Each setting the memory limit cannot hold, and what to change. */
export function limitWarnings ({ listener, overload, admin }: LimitSettings, limit: MemoryLimit): string[] {
  const warnings = memoryLimitWarnings(limit)
  const { maxHeaderBytes, maxHeaderCount } = listener
  if (!headsFit(limit.bytes, overload.maxConnections, maxHeaderBytes, maxHeaderCount)) {
    warnings.push(`MAX_CONNECTIONS ${overload.maxConnections} unfinished request heads of MAX_HEADER_BYTES ${maxHeaderBytes} and MAX_HEADER_COUNT ${maxHeaderCount} (${headCost(maxHeaderBytes, maxHeaderCount)} bytes each) and an idle sidecar (${IDLE_PRIVATE_BYTES}) may not fit in the memory limit of ${limit.bytes} bytes: lower MAX_CONNECTIONS or MAX_HEADER_BYTES, or raise the limit`)
  }
  if (limit.bytes > 0 && adminHeadsBytes(admin.maxConnections) > ADMIN_HEADS_WATER * limit.bytes) {
    warnings.push(`ADMIN_MAX_CONNECTIONS ${admin.maxConnections} unfinished admin heads (${adminHeadsBytes(admin.maxConnections)} bytes) are over ${ADMIN_HEADS_WATER * 100} % of the memory limit of ${limit.bytes} bytes, beside the proxy port's heads: lower ADMIN_MAX_CONNECTIONS`)
  }
  return warnings
}
