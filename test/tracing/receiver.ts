// A stand-in OTLP/HTTP receiver (an OpenTelemetry Collector's /v1/traces): records the spans
// the sidecar exports in OTLP's JSON encoding, or answers as a collector in trouble would
// (refusing with 503, or never answering).
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'
import type { AddressInfo, Socket } from 'node:net'
import type { Test } from 'tap'

type AnyValue = { stringValue?: string, intValue?: string | number, boolValue?: boolean, doubleValue?: number }
interface OtlpSpan {
  traceId: string
  spanId: string
  parentSpanId?: string
  name: string
  kind: number
  attributes?: Array<{ key: string, value: AnyValue }>
  events?: Array<{ name: string, attributes?: Array<{ key: string, value: AnyValue }> }>
  links?: Array<{ traceId: string, spanId: string }>
  status?: { code?: number }
}

/** A span as the tests read it: attributes flattened. */
export interface Seen {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  kind: number
  attributes: Record<string, unknown>
  events: Array<{ name: string, attributes: Record<string, unknown> }>
  links: Array<{ traceId: string, spanId: string }>
  error: boolean
  resource: Record<string, unknown>
}

const valueOf = (v: AnyValue): unknown => v.stringValue ?? (v.intValue === undefined ? undefined : Number(v.intValue)) ?? v.boolValue ?? v.doubleValue
const flat = (list: Array<{ key: string, value: AnyValue }> = []): Record<string, unknown> => Object.fromEntries(list.map((a) => [a.key, valueOf(a.value)]))

export type Mode = 'record' | 'refuse' | 'hang'

export async function startReceiver (t: Test, mode: Mode = 'record') {
  const spans: Seen[] = []
  const requests: Array<{ contentType: string, bytes: number }> = []
  const sockets = new Set<Socket>()
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = []
    req.on('data', (c: Buffer) => { chunks.push(c) })
    req.on('end', () => {
      const body = Buffer.concat(chunks)
      requests.push({ contentType: String(req.headers['content-type']), bytes: body.length })
      if (mode === 'hang') return
      if (mode === 'refuse') {
        res.writeHead(503).end()
        return
      }
      if (String(req.headers['content-type']).startsWith('application/json')) {
        const parsed = JSON.parse(body.toString()) as { resourceSpans: Array<{ resource?: { attributes?: Array<{ key: string, value: AnyValue }> }, scopeSpans: Array<{ spans: OtlpSpan[] }> }> }
        for (const rs of parsed.resourceSpans) {
          for (const ss of rs.scopeSpans) {
            for (const s of ss.spans) {
              spans.push({
                traceId: s.traceId,
                spanId: s.spanId,
                parentSpanId: s.parentSpanId ?? '',
                name: s.name,
                kind: s.kind,
                attributes: flat(s.attributes),
                events: (s.events ?? []).map((e) => ({ name: e.name, attributes: flat(e.attributes) })),
                links: s.links ?? [],
                error: s.status?.code === 2,
                resource: flat(rs.resource?.attributes)
              })
            }
          }
        }
      }
      res.writeHead(200, { 'content-type': 'application/json' }).end('{}')
    })
  })
  server.on('connection', (socket: Socket) => {
    sockets.add(socket)
    socket.on('close', () => { sockets.delete(socket) })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => new Promise<void>((resolve) => {
    for (const socket of sockets) socket.destroy()
    server.close(() => { resolve() })
  }))
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    spans,
    requests,
    /** The spans of one trace. */
    trace: (traceId: string) => spans.filter((s) => s.traceId === traceId)
  }
}
