// A stand-in for Jaeger in test/deploy/containers.sh, where no image of it can be had: takes
// OTLP/HTTP traces on Jaeger's port 4318 (protobuf, the sidecar's default encoding) and shows
// every span it recorded, as JSON, on Jaeger's UI port 16686. Run by node alone (type
// stripping), with no dependency: the protobuf wire format is read here, for the few fields
// the test checks. Not a collector to use: it keeps every span in memory.
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http'

type Attributes = Record<string, unknown>
export interface RecordedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  kind: number
  attributes: Attributes
  events: Array<{ name: string, attributes: Attributes }>
  links: Array<{ traceId: string, spanId: string }>
  /** Status code 2: error. */
  error: boolean
  resource: Attributes
}

interface Field { number: number, varint: bigint, bytes: Buffer }

/** The fields of one protobuf message, in order (wire types 0, 1, 2 and 5). */
function fields (message: Buffer): Field[] {
  const out: Field[] = []
  let at = 0
  const varint = (): bigint => {
    let value = 0n
    for (let shift = 0n; ; shift += 7n) {
      const byte = message[at++]
      if (byte === undefined) throw new Error('truncated varint')
      value |= BigInt(byte & 0x7f) << shift
      if ((byte & 0x80) === 0) return value
    }
  }
  const take = (length: number): Buffer => {
    if (at + length > message.length) throw new Error('truncated field')
    at += length
    return message.subarray(at - length, at)
  }
  while (at < message.length) {
    const key = Number(varint())
    const wire = key & 7
    const field: Field = { number: key >>> 3, varint: 0n, bytes: Buffer.alloc(0) }
    if (wire === 0) field.varint = varint()
    else if (wire === 1) field.bytes = take(8)
    else if (wire === 2) field.bytes = take(Number(varint()))
    else if (wire === 5) field.bytes = take(4)
    else throw new Error(`wire type ${wire} not supported`)
    out.push(field)
  }
  return out
}

const all = (message: Buffer, number: number): Buffer[] => fields(message).filter((f) => f.number === number).map((f) => f.bytes)
const first = (message: Buffer, number: number): Field | undefined => fields(message).find((f) => f.number === number)
const text = (message: Buffer, number: number): string => first(message, number)?.bytes.toString('utf8') ?? ''
const hex = (message: Buffer, number: number): string => first(message, number)?.bytes.toString('hex') ?? ''

/** opentelemetry.proto.common.v1.AnyValue: string, bool, int, double. */
function anyValue (message: Buffer): unknown {
  const [field] = fields(message)
  switch (field?.number) {
    case 1: return field.bytes.toString('utf8')
    case 2: return field.varint !== 0n
    case 3: return Number(BigInt.asIntN(64, field.varint))
    case 4: return field.bytes.readDoubleLE(0)
    default: return undefined
  }
}

/** A list of KeyValue (key 1, value 2). */
const attributes = (messages: Buffer[]): Attributes =>
  Object.fromEntries(messages.map((kv) => [text(kv, 1), anyValue(first(kv, 2)?.bytes ?? Buffer.alloc(0))]))

/** ExportTraceServiceRequest: resource_spans 1 > (resource 1 > attributes 1, scope_spans 2 > spans 2). */
export function decodeTraces (body: Buffer): RecordedSpan[] {
  const spans: RecordedSpan[] = []
  for (const resourceSpans of all(body, 1)) {
    const resource = attributes(all(first(resourceSpans, 1)?.bytes ?? Buffer.alloc(0), 1))
    for (const scopeSpans of all(resourceSpans, 2)) {
      for (const span of all(scopeSpans, 2)) {
        spans.push({
          traceId: hex(span, 1),
          spanId: hex(span, 2),
          parentSpanId: hex(span, 4),
          name: text(span, 5),
          kind: Number(first(span, 6)?.varint ?? 0n),
          attributes: attributes(all(span, 9)),
          events: all(span, 11).map((event) => ({ name: text(event, 2), attributes: attributes(all(event, 3)) })),
          links: all(span, 13).map((link) => ({ traceId: hex(link, 1), spanId: hex(link, 2) })),
          error: first(first(span, 15)?.bytes ?? Buffer.alloc(0), 3)?.varint === 2n,
          resource
        })
      }
    }
  }
  return spans
}

const recorded: RecordedSpan[] = []

const otlp = createServer((req: IncomingMessage, res: ServerResponse) => {
  const chunks: Buffer[] = []
  req.on('data', (chunk: Buffer) => { chunks.push(chunk) })
  req.on('end', () => {
    if (req.method !== 'POST' || req.url !== '/v1/traces') {
      res.writeHead(404).end()
    } else if (req.headers['content-type'] !== 'application/x-protobuf') {
      res.writeHead(415).end()
    } else {
      try {
        recorded.push(...decodeTraces(Buffer.concat(chunks)))
        // An empty ExportTraceServiceResponse: everything accepted.
        res.writeHead(200, { 'content-type': 'application/x-protobuf' }).end()
      } catch (err) {
        res.writeHead(400, { 'content-type': 'text/plain' }).end((err as Error).message)
      }
    }
  })
})
const ui = createServer((_req: IncomingMessage, res: ServerResponse) => {
  res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify(recorded))
})

otlp.listen(4318, '0.0.0.0')
ui.listen(16686, '0.0.0.0')
process.stdout.write('otlp-recorder: OTLP/HTTP traces on :4318, the spans recorded on :16686\n')
// `docker stop`: exit 0, as Jaeger does.
for (const signal of ['SIGTERM', 'SIGINT'] as const) {
  process.once(signal, () => {
    otlp.close()
    ui.close()
    otlp.closeAllConnections()
    ui.closeAllConnections()
    process.exitCode = 0
  })
}
