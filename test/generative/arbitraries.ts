// Generators for the generative suite. Values stay small and printable (a large body
// is a size and a seed, made into bytes only when sent), so a shrunk counterexample
// reads well in the test output.
import fc from 'fast-check'
import type { Abort, CallerRequest } from '../helpers/caller.js'
import type { Answer, Framing } from '../helpers/recording-upstream.js'

export const METHODS = ['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const
export const BODY_METHODS = ['POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS'] as const
export const REPLAY_LIMIT = 64 * 1024

/** A body: literal bytes (small), or `size` bytes made from `seed`. */
export type BodySpec = { bytes: number[] } | { size: number, seed: number }

/** Deterministic bytes (xorshift32): every byte value, so never valid UTF-8 for long. */
export function bodyOf (spec: BodySpec): Buffer {
  if ('bytes' in spec) return Buffer.from(spec.bytes)
  const out = Buffer.allocUnsafe(spec.size)
  let x = (spec.seed | 0) || 0x9e3779b9
  for (let i = 0; i < out.length; i++) {
    x ^= x << 13; x ^= x >>> 17; x ^= x << 5
    out[i] = x & 0xff
  }
  return out
}

const utf8 = (s: string): number[] => [...Buffer.from(s, 'utf8')]

export const bodyArb: fc.Arbitrary<BodySpec> = fc.oneof(
  { weight: 2, arbitrary: fc.constant<BodySpec>({ bytes: [] }) },
  // Arbitrary bytes: invalid UTF-8, NUL, CR/LF, whatever.
  { weight: 4, arbitrary: fc.array(fc.integer({ min: 0, max: 255 }), { minLength: 1, maxLength: 200 }).map((bytes) => ({ bytes })) },
  { weight: 2, arbitrary: fc.json({ maxDepth: 2 }).map((s) => ({ bytes: utf8(s) })) },
  { weight: 1, arbitrary: fc.string({ unit: 'grapheme', maxLength: 40 }).map((s) => ({ bytes: utf8(s) })) },
  // Around the 64 KiB replay limit, and over 1 MiB (Fastify's default body limit).
  { weight: 2, arbitrary: fc.record({ size: fc.integer({ min: REPLAY_LIMIT - 4, max: REPLAY_LIMIT + 4 }), seed: fc.nat() }) },
  { weight: 1, arbitrary: fc.record({ size: fc.integer({ min: 1024 * 1024, max: 3 * 1024 * 1024 }), seed: fc.nat() }) }
)

/** Picks from a list by index, so a counterexample shrinks toward any earlier entry, not only the first. */
export function pick<T> (values: readonly T[]): fc.Arbitrary<T> {
  return fc.integer({ min: 0, max: values.length - 1 }).map((i) => values[i] as T)
}

export const contentTypeArb = pick([
  null, 'text/plain', 'text/plain; charset=utf-8', 'Text/Plain;Charset=ISO-8859-1', 'application/json',
  'application/json; charset=utf-8', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=----gen',
  'application/octet-stream', 'application/vnd.ti.order+json; v=2', 'x-made/up', 'text/csv', 'application/xml'
])

const PCHAR = [...'abcXYZ019-._~!$&\'()*+,;=:@']
const pctOf = (b: number, lower: boolean): string => '%' + (lower ? b.toString(16).padStart(2, '0') : b.toString(16).padStart(2, '0').toUpperCase())
/** A percent-encoded byte: any ASCII byte, or a whole UTF-8 character (what decodeURIComponent accepts). */
const pctByte = fc.oneof(
  fc.tuple(fc.integer({ min: 0, max: 127 }), fc.boolean()).map(([b, lower]) => pctOf(b, lower)),
  fc.tuple(fc.string({ unit: 'grapheme', minLength: 1, maxLength: 1 }), fc.boolean()).map(([ch, lower]) => [...Buffer.from(ch, 'utf8')].map((b) => pctOf(b, lower)).join(''))
)
/** A percent-encoded byte that is not UTF-8 on its own (legal in a URI: RFC 3986 §2.1 says octets). */
export const pctNonUtf8 = fc.tuple(fc.integer({ min: 0x80, max: 0xff }), fc.boolean()).map(([b, lower]) => pctOf(b, lower))

/** Percent-decodes bytewise (no UTF-8 interpretation): what a segment means on the wire. */
function decodeBytes (segment: string): string {
  return segment.replace(/%([0-9a-fA-F]{2})/g, (_m, h: string) => String.fromCharCode(parseInt(h, 16)))
}

/**
 * A path segment: RFC 3986 pchars and percent-encoded bytes. Never a dot-segment (`..;x` is one), a
 * backslash, or something that decodes into one (`%2F..`): the sidecar refuses those
 * by design (README, Endpoints), so they are not expected to pass.
 */
function segmentOf (pct: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc.string({ unit: fc.oneof({ weight: 3, arbitrary: fc.constantFrom(...PCHAR) }, { weight: 1, arbitrary: pct }), minLength: 1, maxLength: 8 })
    .filter((s) => { const d = decodeBytes(s); return !d.includes('\\') && d.split('/').every((part) => !['.', '..'].includes(part.split(';', 1)[0] ?? '')) })
}
const segmentArb = segmentOf(pctByte)

const queryArb = fc.string({ unit: fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...PCHAR, '/', '?', '=', '&') }, { weight: 1, arbitrary: pctByte }), maxLength: 24 })

export const targetArb = targetOf(segmentArb)

/** Paths where some segment holds a percent-encoded byte that is not UTF-8 (`/files/%FF`). */
export const nonUtf8TargetArb = targetOf(fc.tuple(segmentArb, pctNonUtf8).map(([seg, pct]) => seg + pct))

function targetOf (segment: fc.Arbitrary<string>): fc.Arbitrary<string> {
  return fc.tuple(fc.array(segment, { minLength: 1, maxLength: 4 }), fc.option(queryArb), fc.boolean()).map(([segments, query, slash]) => '/' + segments.join('/') + (slash ? '/' : '') + (query === null ? '' : '?' + query))
}

const VISIBLE = [...'abcdefXYZ0123456789 -_.,;:=/+*()<>@?[]{}"\'!#$%&^`|~\\']
const shortValue = fc.string({ unit: fc.constantFrom(...VISIBLE), maxLength: 30 }).map((s) => s.trim() === '' ? 'v' : s.trim())
const longValue = fc.tuple(fc.integer({ min: 1000, max: 4000 }), fc.constantFrom('a', 'Zz9', 'q=0.5, ')).map(([n, s]) => s.repeat(Math.ceil(n / s.length)).slice(0, n).trim())
const valueArb = fc.oneof({ weight: 6, arbitrary: shortValue }, { weight: 1, arbitrary: longValue })

/** End-to-end request headers: names in any case; list headers may repeat. */
const LIST_NAMES = ['x-gen-list', 'accept', 'cache-control', 'x-forwarded-for', 'via', 'accept-language']
const SINGLE_NAMES = ['x-gen-single', 'user-agent', 'if-none-match', 'x-request-id', 'authorization', 'cookie', 'forwarded', 'x-api-key']
export const requestHeadersArb: fc.Arbitrary<Array<[string, string | string[]]>> = fc.uniqueArray(
  fc.oneof(
    fc.tuple(fc.mixedCase(fc.constantFrom(...LIST_NAMES)), fc.oneof(valueArb, fc.array(shortValue, { minLength: 2, maxLength: 3 }))),
    fc.tuple(fc.mixedCase(fc.constantFrom(...SINGLE_NAMES)), valueArb)
  ),
  { maxLength: 6, selector: ([name]) => name.toLowerCase() }
)

/** Hop-by-hop headers a caller may send: none of them may reach the upstream. */
export const hopByHopArb: fc.Arbitrary<Array<[string, string]>> = fc.subarray([
  ['Connection', 'close, X-Hop-Secret'], ['X-Hop-Secret', 'only-for-the-next-hop'], ['Keep-Alive', 'timeout=5'],
  ['TE', 'trailers'], ['Proxy-Authorization', 'Basic Zm9vOmJhcg=='], ['Proxy-Connection', 'keep-alive']
] as Array<[string, string]>)

export interface RequestCase {
  method: string
  target: string
  headers: Array<[string, string | string[]]>
  contentType: string | null
  body: BodySpec
  framing: 'none' | 'length' | 'chunked'
  /** Where the body is split into writes, per mille of its length. */
  cutsPerMille: number[]
  expectContinue: boolean
}

export function requestCaseArb ({ methods = METHODS as readonly string[], target = fc.constant('/v2/store/orders') as fc.Arbitrary<string>, headers = fc.constant([]) as fc.Arbitrary<Array<[string, string | string[]]>>, body = bodyArb } = {}): fc.Arbitrary<RequestCase> {
  return fc.record({
    method: pick(methods),
    target,
    headers,
    contentType: contentTypeArb,
    body,
    framing: fc.constantFrom('length', 'chunked', 'none') as fc.Arbitrary<'none' | 'length' | 'chunked'>,
    cutsPerMille: fc.array(fc.integer({ min: 1, max: 999 }), { maxLength: 3 }),
    expectContinue: fc.integer({ min: 0, max: 5 }).map((n) => n === 5)
  }).map((c) => {
    const size = bodyOf(c.body).length
    // `none` (no framing header) only for an empty body; 100-continue only with a body to send.
    const framing = size > 0 && c.framing === 'none' ? 'length' : c.framing
    return { ...c, framing, expectContinue: c.expectContinue && size > 0 }
  })
}

/** The wire form of a case, with the test's request id header and, maybe, an abort. */
export function toCallerRequest (c: RequestCase, id: string, abort: Abort | null = null): CallerRequest {
  const body = bodyOf(c.body)
  const headers: Array<[string, string | string[]]> = [...c.headers, ['X-Gen-Id', id]]
  if (c.contentType !== null) headers.push(['Content-Type', c.contentType])
  return {
    method: c.method,
    target: c.target,
    headers,
    body,
    framing: c.framing,
    cuts: c.cutsPerMille.map((p) => Math.floor(body.length * p / 1000)),
    expectContinue: c.expectContinue,
    abort
  }
}

/** A fixed Date, so the sidecar never adds one of its own and both answers compare. */
export const DATE: [string, string] = ['Date', 'Mon, 23 Nov 2026 00:00:00 GMT']

const answerHeaderArb: fc.Arbitrary<Array<[string, string]>> = fc.array(
  fc.tuple(fc.mixedCase(fc.constantFrom('x-up-a', 'x-up-b', 'set-cookie', 'cache-control', 'etag', 'vary', 'link', 'x-ratelimit-remaining', 'www-authenticate')), valueArb),
  { maxLength: 6 }
)
const answerHopArb: fc.Arbitrary<Array<[string, string]>> = fc.subarray([
  ['Connection', 'X-Up-Hop'], ['X-Up-Hop', 'only-for-the-next-hop'], ['Keep-Alive', 'timeout=30'],
  ['Proxy-Authenticate', 'Basic realm="x"'], ['Proxy-Connection', 'keep-alive']
] as Array<[string, string]>)

export const STATUSES = [200, 201, 202, 203, 204, 206, 299, 301, 302, 304, 400, 403, 404, 409, 418, 422, 429, 500, 502, 503]

export interface AnswerCase { status: number, headers: Array<[string, string]>, hop: Array<[string, string]>, contentType: string | null, body: BodySpec, framing: Framing }

export const answerCaseArb: fc.Arbitrary<AnswerCase> = fc.record({
  status: pick(STATUSES),
  headers: answerHeaderArb,
  hop: answerHopArb,
  contentType: contentTypeArb,
  body: fc.oneof({ weight: 5, arbitrary: bodyArb }, { weight: 1, arbitrary: fc.record({ size: fc.integer({ min: 0, max: 5 * 1024 * 1024 }), seed: fc.nat() }) }),
  framing: fc.constantFrom('length', 'chunked', 'close') as fc.Arbitrary<Framing>
})

export function toAnswer (a: AnswerCase): Answer {
  const headers: Array<[string, string]> = [DATE, ...a.headers, ...a.hop]
  if (a.contentType !== null) headers.push(['Content-Type', a.contentType])
  const bodyless = a.status === 204 || a.status === 304
  return { status: a.status, headers, body: bodyless ? Buffer.alloc(0) : bodyOf(a.body), framing: bodyless ? 'none' : a.framing }
}
