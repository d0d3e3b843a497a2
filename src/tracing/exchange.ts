// One caller's exchange as the request tracing follows it: its server span, its sends to TI
// and the client span of the send under way, shared by request.ts and upstream-spans.ts.
import type { Context, Span } from '@opentelemetry/api'

export interface Exchange {
  readonly method: string
  readonly span: Span
  /** The caller's context, and the server span in it. */
  readonly context: Context
  sends: number
  client: Span | undefined
}

/** The send under way is over (answered, failed, replaced or cut off): its client span ends. */
export function endClient (exchange: Exchange): void {
  exchange.client?.end()
  exchange.client = undefined
}
