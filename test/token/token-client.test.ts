import { createServer, type IncomingHttpHeaders } from 'node:http'
import type { AddressInfo } from 'node:net'
import t, { type Test } from 'tap'
import { Agent } from 'undici'
import {
  createTokenClient, MAX_RESPONSE_BYTES, MAX_TOKEN_LIFETIME_MS, oauthErrorCode, parseExpiresIn, parseRetryAfter, parseTokenResponse,
  TOKEN_INFO_MAX_LENGTH, tokenEndpointUrl, tokenInfo, TokenRequestError
} from '../../src/token/token-client.js'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'

const credentials = () => ({ clientId: CLIENT_ID, clientSecret: CLIENT_SECRET })

interface Seen { method: string, url: string, headers: IncomingHttpHeaders, body: string }

/** A token endpoint that records the raw request and answers what the test says. */
async function rawEndpoint (t: Test, answer: (res: import('node:http').ServerResponse) => void) {
  const seen: Seen[] = []
  const server = createServer((req, res) => {
    let body = ''
    req.setEncoding('utf8')
    req.on('data', (c: string) => { body += c })
    req.on('end', () => {
      seen.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers, body })
      answer(res)
    })
  })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen }
}

t.test('the request is exactly the contract: POST, no query, form type, raw unencoded body', async (t) => {
  const endpoint = await rawEndpoint(t, (res) => {
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ access_token: 'abc', token_type: 'bearer', expires_in: 3599 }))
  })
  const fetchToken = createTokenClient({ authUrl: endpoint.url + '/', timeoutMs: 2000, credentials })
  const token = await fetchToken()
  t.same(token, { accessToken: 'abc', lifetimeMs: 3_599_000, info: {} })
  t.equal(endpoint.seen.length, 1)
  const [req] = endpoint.seen
  t.equal(req?.method, 'POST')
  t.equal(req?.url, '/v1/oauth/accesstoken')
  t.equal(req?.headers['content-type'], 'application/x-www-form-urlencoded')
  t.equal(req?.headers.accept, 'application/json')
  t.equal(req?.body, 'grant_type=client_credentials&client_id=demo-client&client_secret=Zm9v+YmFy/c2VjcmV0=')
  t.notMatch(req?.body, '%2B', 'no percent-encoding')
})

for (const style of ['ti', 'apigee'] as const) {
  t.test(`the stand-in accepts the request and both answer styles parse (${style})`, async (t) => {
    const standIn = await startStandIn(t, { style, tokenLifetimeMs: 4000 })
    const fetchToken = createTokenClient({ authUrl: standIn.url, timeoutMs: 2000, credentials })
    const token = await fetchToken()
    t.match(token.accessToken, /^[A-Za-z0-9_-]{28}$/)
    t.equal(token.lifetimeMs, 3000)
    t.equal(standIn.tokensIssued(), 1)
  })
}

t.test('the stand-in rejects a percent-encoded body, as the gateway would', async (t) => {
  const standIn = await startStandIn(t)
  const res = await fetch(standIn.url + '/v1/oauth/accesstoken', {
    method: 'POST',
    headers: { 'content-type': 'application/x-www-form-urlencoded' },
    body: new URLSearchParams({ grant_type: 'client_credentials', client_id: CLIENT_ID, client_secret: CLIENT_SECRET }).toString()
  })
  t.equal(res.status, 401)
  t.same(await res.json(), { ErrorCode: 'invalid_client', Error: 'ClientId is Invalid' })
})

t.test('wrong credentials against the stand-in: rejected, with the OAuth code and no secret', async (t) => {
  const standIn = await startStandIn(t)
  const fetchToken = createTokenClient({
    authUrl: standIn.url, timeoutMs: 2000, credentials: () => ({ clientId: CLIENT_ID, clientSecret: 'wrong-secret' })
  })
  const err = await fetchToken().catch((e: unknown) => e) as TokenRequestError
  t.type(err, TokenRequestError)
  t.equal(err.outcome, 'rejected')
  t.equal(err.statusCode, 401)
  t.equal(err.oauthError, 'invalid_client')
  t.notMatch(err.message, 'wrong-secret')
})

t.test('a hanging endpoint times out', async (t) => {
  const endpoint = await rawEndpoint(t, () => { /* never answers */ })
  const fetchToken = createTokenClient({ authUrl: endpoint.url, timeoutMs: 100, credentials })
  const err = await fetchToken().catch((e: unknown) => e) as TokenRequestError
  t.equal(err.outcome, 'timeout')
  t.equal(err.message, 'token endpoint did not answer within 100 ms', 'the reason /status shows')
})

t.test('an unreachable endpoint is a network error', async (t) => {
  const endpoint = await rawEndpoint(t, () => {})
  const closed = endpoint.url.replace(/:\d+$/, ':1')
  const fetchToken = createTokenClient({ authUrl: closed, timeoutMs: 1000, credentials })
  const err = await fetchToken().catch((e: unknown) => e) as TokenRequestError
  t.equal(err.outcome, 'network_error')
  t.equal(err.message, 'token endpoint unreachable (ECONNREFUSED)', 'the reason /status shows')
  t.equal((err.cause as { code?: string } | undefined)?.code, 'ECONNREFUSED', 'the cause kept for the log')
})

t.test('the dispatcher given is the one used; a failure with no code is named unknown; only transport errors carry a cause', async (t) => {
  const endpoint = await rawEndpoint(t, (res) => { res.end(JSON.stringify({ access_token: 'abc', expires_in: 60 })) })
  let used = 0
  const counting = new Agent().compose((dispatch) => (options, handler) => { used += 1; return dispatch(options, handler) })
  t.teardown(async () => { await counting.close() })
  t.equal((await createTokenClient({ authUrl: endpoint.url, timeoutMs: 2000, credentials, dispatcher: counting })()).accessToken, 'abc')
  t.equal(used, 1, 'the request went through the dispatcher given')
  const failing = new Agent().compose(() => () => { throw new Error('no route to the token endpoint') })
  t.teardown(async () => { await failing.close() })
  const err = await createTokenClient({ authUrl: endpoint.url, timeoutMs: 2000, credentials, dispatcher: failing })().catch((e: unknown) => e) as TokenRequestError
  t.same([err.outcome, err.message], ['network_error', 'token endpoint unreachable (unknown)'])
  t.notOk('cause' in parseTokenResponseError(), 'an answer the endpoint gave has no cause')
})

function parseTokenResponseError (): TokenRequestError {
  try {
    parseTokenResponse(500, {}, '')
  } catch (err) {
    return err as TokenRequestError
  }
  throw new Error('a 500 parsed as a token')
}

t.test('an oversized answer is not read whole', async (t) => {
  const endpoint = await rawEndpoint(t, (res) => { res.end('x'.repeat(200_000)) })
  const fetchToken = createTokenClient({ authUrl: endpoint.url, timeoutMs: 2000, credentials })
  const err = await fetchToken().catch((e: unknown) => e) as TokenRequestError
  t.equal(err.outcome, 'invalid_response')
})

t.test('a token answer over 64 KiB is refused even when it is a valid token, and reading stops there', async (t) => {
  // Valid JSON with a usable token, padded past the cap: only the size refuses it.
  const padded = JSON.stringify({ access_token: 'abc', expires_in: 3599, padding: 'x'.repeat(MAX_RESPONSE_BYTES) })
  const big = await rawEndpoint(t, (res) => { res.end(padded) })
  const err = await createTokenClient({ authUrl: big.url, timeoutMs: 5000, credentials })().catch((e: unknown) => e) as TokenRequestError
  t.equal(err.outcome, 'invalid_response')
  t.equal(err.message, `token endpoint answer exceeds ${MAX_RESPONSE_BYTES} bytes`)
  // An answer that never ends: refused once past the cap, not after the timeout.
  const endless = await rawEndpoint(t, (res) => {
    res.writeHead(200, { 'content-type': 'application/json' })
    res.write('{"access_token":"abc","expires_in":3599,"padding":"' + 'x'.repeat(MAX_RESPONSE_BYTES + 1))
  })
  const started = performance.now()
  const endlessErr = await createTokenClient({ authUrl: endless.url, timeoutMs: 30_000, credentials })().catch((e: unknown) => e) as TokenRequestError
  t.equal(endlessErr.outcome, 'invalid_response', 'refused at the cap')
  t.ok(performance.now() - started < 15_000, 'long before the 30 s timeout')
  // A body of exactly the cap is still read.
  const exact = JSON.stringify({ access_token: 'abc', expires_in: 3599, padding: '' })
  const fill = 'x'.repeat(MAX_RESPONSE_BYTES - Buffer.byteLength(exact))
  const atCap = await rawEndpoint(t, (res) => { res.end(JSON.stringify({ access_token: 'abc', expires_in: 3599, padding: fill })) })
  t.equal((await createTokenClient({ authUrl: atCap.url, timeoutMs: 5000, credentials })()).accessToken, 'abc', 'an answer of exactly 64 KiB is read')
})

t.test('credentials read asynchronously (secret files); a rejected read fails the request before it is sent', async (t) => {
  const endpoint = await rawEndpoint(t, (res) => { res.end('{}') })
  const fetchToken = createTokenClient({
    authUrl: endpoint.url,
    timeoutMs: 2000,
    credentials: async () => await Promise.reject(new Error('CLIENT_SECRET_FILE: cannot read /run/s: it is a FIFO, not a regular file'))
  })
  const err = await fetchToken().catch((e: unknown) => e) as TokenRequestError
  t.equal(err.outcome, 'credentials_unreadable')
  t.equal(err.message, 'cannot read the client credentials: CLIENT_SECRET_FILE: cannot read /run/s: it is a FIFO, not a regular file')
  t.equal(endpoint.seen.length, 0)
})

t.test('the token URL named in logs is AUTH_URL plus the contract path', async (t) => {
  t.equal(tokenEndpointUrl('https://transact.ti.com/'), 'https://transact.ti.com/v1/oauth/accesstoken')
  t.equal(tokenEndpointUrl('https://transact.ti.com//'), 'https://transact.ti.com/v1/oauth/accesstoken', 'every trailing slash')
})

t.test('the answer\'s non-secret fields are kept (whitelist), never the token; one echoing the token or the secret is dropped', async (t) => {
  const token = parseTokenResponse(200, {}, ok({
    access_token: 'a1b2c3',
    expires_in: '3599',
    token_type: 'BearerToken',
    application_name: 'store-app',
    client_id: 'demo-client',
    scope: '',
    issued_at: '1700000000000',
    status: 'approved',
    'developer.email': 'dev@example.com',
    refresh_token: 'r1',
    api_product_list: '[Store]'
  }))
  t.same(token.info, { application_name: 'store-app', client_id: 'demo-client', scope: '', issued_at: '1700000000000', status: 'approved' })
  const numbers = parseTokenResponse(200, {}, ok({ access_token: 'a1', expires_in: 60, issued_at: 1700000000000, scope: ['x'] }))
  t.same(numbers.info, { issued_at: '1700000000000' }, 'a number as its digits; other types left out')
  const odd = parseTokenResponse(200, {}, ok({
    access_token: 'a1b2c3', expires_in: 60, scope: 'read a1b2c3', status: 'x\r\ny', application_name: 'n'.repeat(TOKEN_INFO_MAX_LENGTH + 1)
  }))
  t.same(odd.info, {}, 'echoing the token, control characters, too long: all left out')

  const endpoint = await rawEndpoint(t, (res) => {
    res.setHeader('content-type', 'application/json')
    res.end(JSON.stringify({ access_token: 'abc', expires_in: 3599, application_name: `echo ${CLIENT_SECRET}`, client_id: CLIENT_ID }))
  })
  const fetched = await createTokenClient({ authUrl: endpoint.url, timeoutMs: 2000, credentials })()
  t.same(fetched.info, { client_id: CLIENT_ID }, 'a field echoing the client secret is dropped')
})

t.test('unreadable credentials fail the request before it is sent', async (t) => {
  const endpoint = await rawEndpoint(t, (res) => { res.end('{}') })
  const fetchToken = createTokenClient({ authUrl: endpoint.url, timeoutMs: 2000, credentials: () => { throw new Error('ENOENT') } })
  const err = await fetchToken().catch((e: unknown) => e) as TokenRequestError
  t.equal(err.outcome, 'credentials_unreadable')
  t.equal(endpoint.seen.length, 0)
})

const ok = (body: unknown) => JSON.stringify(body)
const parseCases: Array<[string, number, string, { lifetimeMs: number } | string]> = [
  ['TI: number expires_in', 200, ok({ access_token: 'a1', token_type: 'bearer', expires_in: 3599 }), { lifetimeMs: 3_599_000 }],
  ['Apigee: all strings, BearerToken', 200, ok({ access_token: 'a1', token_type: 'BearerToken', expires_in: '3599', issued_at: '1700000000000', scope: '' }), { lifetimeMs: 3_599_000 }],
  ['Bearer capitalised', 200, ok({ access_token: 'a1', token_type: 'Bearer', expires_in: 60 }), { lifetimeMs: 60_000 }],
  ['no token_type', 200, ok({ access_token: 'a1', expires_in: 60 }), { lifetimeMs: 60_000 }],
  ['longer than 60 min is capped', 200, ok({ access_token: 'a1', expires_in: 86_400 }), { lifetimeMs: MAX_TOKEN_LIFETIME_MS }],
  ['HTML', 200, '<html>maintenance</html>', 'invalid_response'],
  ['empty', 200, '', 'invalid_response'],
  ['JSON array', 200, '[]', 'invalid_response'],
  ['no access_token', 200, ok({ expires_in: 3599 }), 'invalid_response'],
  ['empty access_token', 200, ok({ access_token: '', expires_in: 3599 }), 'invalid_response'],
  ['access_token with CR/LF', 200, ok({ access_token: 'a\r\nx-evil: 1', expires_in: 3599 }), 'invalid_response'],
  ['no expires_in', 200, ok({ access_token: 'a1' }), 'invalid_response'],
  ['expires_in zero', 200, ok({ access_token: 'a1', expires_in: 0 }), 'invalid_response'],
  ['expires_in negative', 200, ok({ access_token: 'a1', expires_in: -5 }), 'invalid_response'],
  ['expires_in not digits', 200, ok({ access_token: 'a1', expires_in: '1h' }), 'invalid_response'],
  // The whole value is the number: digits with anything before or after are not one.
  ['expires_in digits with a suffix', 200, ok({ access_token: 'a1', expires_in: '3599s' }), 'invalid_response'],
  ['expires_in digits with a prefix', 200, ok({ access_token: 'a1', expires_in: 'PT3599' }), 'invalid_response'],
  ['expires_in digits padded', 200, ok({ access_token: 'a1', expires_in: ' 3599' }), 'invalid_response'],
  ['expires_in over 10 digits', 200, ok({ access_token: 'a1', expires_in: '12345678901' }), 'invalid_response'],
  ['token_type mac', 200, ok({ access_token: 'a1', expires_in: 60, token_type: 'mac' }), 'invalid_response'],
  // token_type names the scheme exactly: bearer or BearerToken, nothing around them.
  ['token_type notbearer', 200, ok({ access_token: 'a1', expires_in: 60, token_type: 'notbearer' }), 'invalid_response'],
  ['token_type bearer-ish', 200, ok({ access_token: 'a1', expires_in: 60, token_type: 'bearer-ish' }), 'invalid_response'],
  ['token_type BearerTokens', 200, ok({ access_token: 'a1', expires_in: 60, token_type: 'BearerTokens' }), 'invalid_response'],
  ['token_type a number', 200, ok({ access_token: 'a1', expires_in: 60, token_type: 1 }), 'invalid_response'],
  ['JSON null', 200, 'null', 'invalid_response'],
  ['JSON number', 200, '42', 'invalid_response'],
  ['500', 500, 'oops', 'server_error'],
  ['503', 503, '', 'server_error'],
  ['429', 429, '', 'rate_limited'],
  ['401 invalid_client (Apigee)', 401, ok({ ErrorCode: 'invalid_client', Error: 'ClientId is Invalid' }), 'rejected'],
  ['400 invalid_client (RFC 6749)', 400, ok({ error: 'invalid_client' }), 'rejected'],
  ['401 without an OAuth body', 401, 'Unauthorized', 'http_error'],
  // Only 400 and 401 say the credentials are wrong (RFC 6749 §5.2); a 403 or 404 with an
  // OAuth code is some other refusal, not a reason to stop retrying at the normal pace.
  ['403 invalid_client', 403, ok({ error: 'invalid_client' }), 'http_error'],
  ['404 invalid_client', 404, ok({ error: 'invalid_client' }), 'http_error'],
  ['401 with a JSON null body', 401, 'null', 'http_error'],
  ['400 with a JSON array body', 400, ok([{ error: 'invalid_client' }]), 'http_error'],
  ['404', 404, 'not found', 'http_error']
]

t.test('answers parsed', async (t) => {
  for (const [name, status, body, expected] of parseCases) {
    if (typeof expected === 'string') {
      const err = t.throws(() => parseTokenResponse(status, {}, body), name) as TokenRequestError
      t.equal(err.outcome, expected, name)
    } else {
      t.match(parseTokenResponse(status, {}, body), expected, name)
    }
  }
})

t.test('Retry-After in seconds or as an HTTP date', async (t) => {
  t.equal(parseRetryAfter('7'), 7000)
  t.equal(parseRetryAfter(['3', '9']), 3000)
  t.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:10 GMT', Date.parse('2026-01-01T00:00:00Z')), 10_000)
  t.equal(parseRetryAfter('soon'), undefined)
  t.equal(parseRetryAfter(undefined), undefined)
  t.equal(parseRetryAfter(' 5 '), 5000, 'spaces around the value')
  t.equal(parseRetryAfter('Thu, 01 Jan 2026 00:00:10 GMT', Date.parse('2026-01-01T00:00:20Z')), 0, 'a date passed: now')
  // Neither delay-seconds nor an HTTP-date (RFC 9110 §5.6.7): not a reason to retry at once.
  for (const junk of ['120abc', '12.5', '-5', '1e3', '2026-01-01T00:00:10Z', '0x10']) {
    t.equal(parseRetryAfter(junk, Date.parse('2026-01-01T00:00:00Z')), undefined, `${junk} is ignored`)
  }
  const err = t.throws(() => parseTokenResponse(429, { 'retry-after': '12' }, '')) as TokenRequestError
  t.equal(err.retryAfterMs, 12_000)
})

t.test('only an identifier-like OAuth code is kept from an error body', async (t) => {
  t.equal(oauthErrorCode(ok({ ErrorCode: 'invalid_client' })), 'invalid_client')
  t.equal(oauthErrorCode(ok({ fault: { detail: { errorcode: 'oauth.v2.InvalidClientIdentifier' } } })), 'oauth.v2.InvalidClientIdentifier')
  t.equal(oauthErrorCode(ok({ error: 'client_secret=Zm9v is wrong' })), undefined)
  t.equal(oauthErrorCode('not json'), undefined)
  for (const body of ['null', '42', '"invalid_client"', '[]', ok(['invalid_client'])]) {
    t.equal(oauthErrorCode(body), undefined, `no code in ${body}`)
  }
  t.equal(oauthErrorCode(ok({ error: 'x'.repeat(65) })), undefined, 'not longer than 64')
  t.equal(oauthErrorCode(ok({ error: 'x'.repeat(64) })), 'x'.repeat(64), '64 characters')
  t.equal(oauthErrorCode(ok({ error: 'invalid client' })), undefined, 'no space')
  t.equal(oauthErrorCode(ok({ error: 7, ErrorCode: 'invalid_client' })), 'invalid_client', 'the first string candidate')
})

t.test('expires_in forms', async (t) => {
  t.equal(parseExpiresIn(3599), 3599)
  t.equal(parseExpiresIn('3599'), 3599)
  t.equal(parseExpiresIn(1.5), undefined)
  t.equal(parseExpiresIn('0'), undefined)
  t.equal(parseExpiresIn(null), undefined)
})

t.test('an error answer keeps its status, OAuth code and Retry-After, and says what happened', async (t) => {
  const cases: Array<[number, Record<string, string>, string, Partial<TokenRequestError>]> = [
    [500, {}, ok({ error: 'server_error' }), { outcome: 'server_error', statusCode: 500, oauthError: 'server_error', message: 'token endpoint failed (500) (server_error)' }],
    [503, { 'retry-after': '7' }, '', { outcome: 'server_error', statusCode: 503, retryAfterMs: 7000, oauthError: undefined, message: 'token endpoint failed (503)' }],
    [429, { 'retry-after': '3' }, '', { outcome: 'rate_limited', retryAfterMs: 3000, message: 'token endpoint rate-limited the request (429)' }],
    [401, {}, ok({ ErrorCode: 'invalid_client' }), { outcome: 'rejected', statusCode: 401, oauthError: 'invalid_client', message: 'token endpoint rejected the client credentials (401) (invalid_client)' }],
    [404, {}, 'nope', { outcome: 'http_error', statusCode: 404, retryAfterMs: undefined, message: 'token endpoint answered 404' }],
    [499, {}, '', { outcome: 'http_error', statusCode: 499, message: 'token endpoint answered 499' }]
  ]
  for (const [status, headers, body, expected] of cases) {
    const err = t.throws(() => parseTokenResponse(status, headers, body)) as TokenRequestError
    t.match({ outcome: err.outcome, statusCode: err.statusCode, retryAfterMs: err.retryAfterMs, oauthError: err.oauthError, message: err.message }, expected, `${status}`)
    t.equal(err.name, 'TokenRequestError')
  }
  const ok200 = t.throws(() => parseTokenResponse(200, {}, ok({ access_token: 'a1' }))) as TokenRequestError
  t.equal(ok200.statusCode, 200)
  t.equal(ok200.message, 'token endpoint answered 200 without a usable expires_in')
})

t.test('shown fields: printable, at most 256 characters, numbers as digits; an empty secret hides nothing', async (t) => {
  t.same(tokenInfo({ scope: 'x'.repeat(TOKEN_INFO_MAX_LENGTH) }), { scope: 'x'.repeat(TOKEN_INFO_MAX_LENGTH) })
  t.same(tokenInfo({ scope: 'x'.repeat(TOKEN_INFO_MAX_LENGTH + 1) }), {})
  t.same(tokenInfo({ scope: 'a\nb', status: 'approved\u0007', client_id: 'é' }), {})
  t.same(tokenInfo({ issued_at: 1700000000000, status: Infinity, scope: true }), { issued_at: '1700000000000' })
  const endpoint = await rawEndpoint(t, (res) => { res.end(ok({ access_token: 'abc', expires_in: 60, application_name: 'store-app' })) })
  const token = await createTokenClient({ authUrl: endpoint.url, timeoutMs: 2000, credentials: () => ({ clientId: 'id', clientSecret: '' }) })()
  t.same(token.info, { application_name: 'store-app' })
})
