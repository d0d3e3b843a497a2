// What the token client says about each answer it cannot use: the reason /status and the
// logs show, the fields kept, and how it leaves the connection.
import { createServer, type Socket } from 'node:net'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { Agent } from 'undici'
import { EgressProxyAuthError, EgressProxyRefusedError, EgressProxyTimeoutError, EgressProxyUnreachableError } from '../../src/http/errors.js'
import { createTokenClient, MAX_RESPONSE_BYTES, parseRetryAfter, parseTokenResponse, TokenRequestError } from '../../src/token/token-client.js'

const credentials = () => ({ clientId: 'id', clientSecret: 'secret' })

function refusal (status: number, headers: Record<string, string>, body: string): TokenRequestError {
  try {
    parseTokenResponse(status, headers, body)
  } catch (err) {
    return err as TokenRequestError
  }
  throw new Error(`${status} ${body} parsed as a token`)
}

t.test('a 200 that is not a token: the reason says what is missing', async (t) => {
  const cases: Array<[string, string]> = [
    ['not json', 'token endpoint answered 200 without a JSON object'],
    ['"a1b2c3"', 'token endpoint answered 200 without a JSON object'],
    ['3599', 'token endpoint answered 200 without a JSON object'],
    ['true', 'token endpoint answered 200 without a JSON object'],
    ['[{"access_token":"a1","expires_in":60}]', 'token endpoint answered 200 without a JSON object'],
    ['{"expires_in":60}', 'token endpoint answered 200 without a usable access_token'],
    ['{"access_token":"a b","expires_in":60}', 'token endpoint answered 200 without a usable access_token'],
    ['{"access_token":"a1","expires_in":60,"token_type":"mac"}', 'token endpoint answered a token_type other than bearer']
  ]
  for (const [body, reason] of cases) {
    const err = refusal(200, {}, body)
    t.same([err.outcome, err.message, err.statusCode], ['invalid_response', reason, 200], body)
  }
})

t.test('an error answer: the reason names the status and, only when the body has one, the OAuth code', async (t) => {
  const cases: Array<[number, string, string | undefined, string]> = [
    [500, '', undefined, 'token endpoint failed (500)'],
    [502, '{"error":"temporarily_unavailable"}', 'temporarily_unavailable', 'token endpoint failed (502) (temporarily_unavailable)'],
    [429, 'slow down', undefined, 'token endpoint rate-limited the request (429)'],
    [401, '{"ErrorCode":"invalid_client"}', 'invalid_client', 'token endpoint rejected the client credentials (401) (invalid_client)'],
    [401, 'Unauthorized', undefined, 'token endpoint answered 401'],
    [404, '{"error":"not_found"}', 'not_found', 'token endpoint answered 404 (not_found)']
  ]
  for (const [status, body, code, reason] of cases) {
    const err = refusal(status, {}, body)
    t.same([err.message, err.statusCode, err.oauthError, err.retryAfterMs], [reason, status, code, undefined], `${status} ${body}`)
  }
})

t.test('Retry-After as an HTTP-date, in each of its three forms, is GMT whatever the local time zone', async (t) => {
  const tz = process.env.TZ
  process.env.TZ = 'America/New_York'
  t.teardown(() => { if (tz === undefined) delete process.env.TZ; else process.env.TZ = tz })
  const now = Date.parse('2026-01-01T00:00:00Z')
  t.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:10 GMT', now), 10_000, 'IMF-fixdate')
  t.equal(parseRetryAfter('Thursday, 01-Jan-26 00:00:10 GMT', now), 10_000, 'RFC 850')
  t.equal(parseRetryAfter('Thu Jan  1 00:00:10 2026', now), 10_000, 'asctime, which names no zone')
  t.equal(parseRetryAfter('in Thu, 01 Jan 2026 00:00:10 GMT', now), undefined, 'a date after other words is not an HTTP-date')
})

/** A token endpoint that answers 200 and then writes without end; resolves `closed` when the client closes the connection. */
async function endlessEndpoint (t: Test) {
  let written = 0
  let closed = (): void => {}
  const connectionClosed = new Promise<number>((resolve) => { closed = () => { resolve(written) } })
  const chunk = Buffer.alloc(16 * 1024, 'x')
  const server = createServer((socket: Socket) => {
    socket.once('data', () => {
      socket.write('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\r\n{"access_token":"a1","expires_in":60,"padding":"')
      const more = (): void => {
        while (!socket.destroyed && socket.write(chunk)) written += chunk.length
      }
      socket.on('drain', more)
      more()
    })
    socket.on('error', () => {})
    socket.once('close', closed)
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, connectionClosed }
}

t.test('an answer over the cap: the connection is closed, not read to its end', async (t) => {
  const endpoint = await endlessEndpoint(t)
  const err = await createTokenClient({ authUrl: endpoint.url, timeoutMs: 60_000, credentials })().catch((e: unknown) => e) as TokenRequestError
  t.equal(err.message, `token endpoint answer exceeds ${MAX_RESPONSE_BYTES} bytes`)
  const written = await endpoint.connectionClosed
  t.ok(written < 100 * MAX_RESPONSE_BYTES, `the endpoint's connection closed after ${written} bytes`)
})

t.test('a failure of the egress proxy is named for the proxy, with its cause', async (t) => {
  const refused = Object.assign(new Error('connect ECONNREFUSED 10.0.0.1:3128'), { code: 'ECONNREFUSED' })
  const cases: Array<[Error, string, string]> = [
    [new EgressProxyAuthError(407), 'proxy_rejected', 'egress proxy refused our credentials (407)'],
    [new EgressProxyUnreachableError({ cause: refused }), 'proxy_error', 'egress proxy could not be reached (ECONNREFUSED)'],
    [new EgressProxyTimeoutError(), 'proxy_error', 'egress proxy did not answer in time'],
    [new EgressProxyRefusedError(502), 'proxy_error', 'egress proxy refused the connection (502)']
  ]
  for (const [failure, outcome, reason] of cases) {
    const dispatcher = new Agent().compose(() => () => { throw failure })
    t.teardown(async () => { await dispatcher.close() })
    const err = await createTokenClient({ authUrl: 'https://transact.example', timeoutMs: 2000, credentials, dispatcher })().catch((e: unknown) => e) as TokenRequestError
    t.same([err.outcome, err.message], [outcome, reason])
    t.equal(err.cause, failure, 'the proxy\'s error kept as the cause')
  }
})
