import { createServer } from 'node:http'
import type { AddressInfo } from 'node:net'
import t from 'tap'
import { request } from 'undici'
import { build, CLIENT_SECRET, startStandIn } from './helpers/build.js'
import { captureLogs } from './helpers/logs.js'
import { startUpstream } from './helpers/upstream.js'

t.test('neither the client secret nor any access token appears in any log line, at any level', async (t) => {
  const upstream = await startUpstream(t, (req, res) => {
    // The upstream answers 401 to one path and fails mid-way on another.
    if (req.url === '/revoked') { res.writeHead(401, { 'www-authenticate': 'Bearer error="invalid_token"' }); res.end(); return }
    res.writeHead(200, { 'set-cookie': 'session=abc' })
    res.end('ok')
  })
  const standIn = await startStandIn(t, { tokenLifetimeMs: 60_000 })
  const { proxyUrl, app, logs } = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstream.url, ACCESS_LOG: 'true', LOG_LEVEL: 'trace' })
  for (const path of ['/a?x=1', '/revoked', '/b']) {
    const res = await request(proxyUrl + path, { headers: { authorization: 'Basic Y2FsbGVyOnBhc3M=', cookie: 'caller=1' } })
    await res.body.dump()
  }
  // Force a second token through the upstream-401 path too.
  app.tokens.invalidate(app.tokens.current()?.generation ?? -1)
  await app.tokens.get()

  const tokens = new Set(upstream.received.map((r) => String(r.headers.authorization).replace('Bearer ', '')))
  t.ok(tokens.size >= 1)
  const text = logs.text()
  t.ok(logs.lines.length > 5, 'there are log lines to search')
  t.notMatch(text, CLIENT_SECRET)
  t.notMatch(text, 'Y2FsbGVyOnBhc3M=', 'nor the caller\'s credentials')
  for (const token of tokens) t.notMatch(text, token)
  t.ok(logs.entries().some((e) => e.msg === 'request' && e.url === '/a?x=1' && e.statusCode === 200), 'access line when ACCESS_LOG=true')
  const access = logs.entries().filter((e) => e.msg === 'request')
  t.equal(access.length, 3)
  t.equal(new Set(access.map((e) => e.reqId)).size, 3, 'each access line names its request')
  t.ok(access.every((e) => typeof e.reqId === 'string' && e.listener === 'proxy'))
})

t.test('token-endpoint error bodies are never logged raw, even when they echo the secret', async (t) => {
  let calls = 0
  const hostile = createServer((req, res) => {
    let body = ''
    req.on('data', (c: Buffer) => { body += c.toString() })
    req.on('end', () => {
      calls += 1
      // 500 with the request echoed; 401 with the secret in an OAuth-looking field; a 200 that is not a token.
      if (calls === 1) { res.writeHead(500); res.end(`failed for ${body}`) } else if (calls === 2) {
        res.writeHead(401, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ error: body, ErrorCode: 'invalid_client' }))
      } else {
        res.writeHead(200, { 'content-type': 'application/json' })
        res.end(JSON.stringify({ access_token: `${CLIENT_SECRET} nope`, expires_in: 'soon' }))
      }
    })
  })
  await new Promise<void>((resolve) => hostile.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { hostile.closeAllConnections(); hostile.close() })
  const url = `http://127.0.0.1:${(hostile.address() as AddressInfo).port}`
  const { app, logs } = await build(t, { AUTH_URL: url, UPSTREAM_URL: url, LOG_LEVEL: 'trace' })
  await app.tokens.start()
  await app.tokens.start()
  t.equal(calls, 3)
  t.notMatch(logs.text(), CLIENT_SECRET)
  t.notMatch(logs.text(), 'grant_type')
  t.ok(logs.entries().some((e) => Number(e.level) >= 40 && e.oauthError === 'invalid_client'), 'the OAuth code is logged')
})

t.test('the logger redacts credential headers wherever a headers object is logged', async (t) => {
  const { log, text } = captureLogs()
  log.info({ req: { headers: { authorization: 'Bearer abc', cookie: 'c=1' } }, res: { headers: { 'set-cookie': 's=1' } } }, 'x')
  log.info({ headers: { 'proxy-authorization': 'Basic abc' }, access_token: 'tok', clientSecret: 'sec' }, 'y')
  for (const leaked of ['Bearer abc', 'c=1', 's=1', 'Basic abc', 'tok"', 'sec"']) t.notMatch(text(), leaked)
  t.match(text(), '[redacted]')
})
