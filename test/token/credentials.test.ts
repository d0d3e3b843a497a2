import { execFileSync } from 'node:child_process'
import { renameSync, rmSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { request } from 'undici'
import { createCredentialReader } from '../../src/token/credentials.js'
import { build, CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'

/** The rotation revokes the old token: the 401 is replayed with renewed() (see test/faults/revocation.test.ts). */

t.test('values from files are re-read on every call, trailing newline trimmed', async (t) => {
  const dir = t.testdir({ id: 'id-1\n', secret: 's1\r\n' })
  const read = createCredentialReader({ file: join(dir, 'id') }, { file: join(dir, 'secret') })
  t.same(await read(), { clientId: 'id-1', clientSecret: 's1' })
  writeFileSync(join(dir, 'secret'), 's2\n')
  t.same(await read(), { clientId: 'id-1', clientSecret: 's2' })
})

t.test('a file whose content cannot be sent fails without repeating it', async (t) => {
  const dir = t.testdir({ secret: 'has&amp\n' })
  const read = createCredentialReader({ value: 'id' }, { file: join(dir, 'secret') })
  const err = await read().catch((e: unknown) => e) as Error
  t.match(err.message, /^CLIENT_SECRET_FILE: the file's content: character 4 of 7 is an '&'/)
  t.notMatch(err.message, 'has&amp')
})

t.test('a file that is not a small regular file fails with the variable, the path and the problem', async (t) => {
  const dir = t.testdir({ id: 'id\n' })
  const read = createCredentialReader({ file: join(dir, 'id') }, { file: '/dev/zero' })
  const err = await read().catch((e: unknown) => e) as Error
  t.equal(err.message, 'CLIENT_SECRET_FILE: cannot read /dev/zero: it is a character device, not a regular file')
})

t.test('CLIENT_SECRET_FILE that became a FIFO: that token attempt fails (credentials_unreadable), the sidecar keeps answering', async (t) => {
  const dir = t.testdir({ secret: `${CLIENT_SECRET}\n` })
  const standIn = await startStandIn(t)
  const { app, adminUrl, logs } = await build(t, {
    AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_SECRET: '', CLIENT_SECRET_FILE: join(dir, 'secret')
  })
  t.ok(app.tokens.current(), 'the first token came from the regular file')
  rmSync(join(dir, 'secret'))
  execFileSync('mkfifo', [join(dir, 'secret')])
  await app.tokens.start()
  t.equal(app.tokens.state().lastFailure, 'credentials_unreadable')
  t.ok(app.tokens.current(), 'the held token is still served')
  const failure = logs.entries().find((e) => e.msg === 'token request failed')
  t.match(failure, { outcome: 'credentials_unreadable', reason: /CLIENT_SECRET_FILE: cannot read .*secret: it is a FIFO, not a regular file/ })
  const ready = await request(adminUrl + '/readyz')
  t.equal(ready.statusCode, 200, 'the event loop and the admin port keep working')
  await ready.body.dump()
  t.equal(standIn.tokensIssued(), 1, 'nothing was sent for the failed attempt')
  t.notMatch(logs.text(), CLIENT_SECRET)
})

t.test('a rotated CLIENT_SECRET_FILE is used by the next token request: no restart, no dropped request', async (t) => {
  const dir = t.testdir({ id: `${CLIENT_ID}\n`, secret: `${CLIENT_SECRET}\n` })
  const standIn = await startStandIn(t)
  const { proxyUrl } = await build(t, {
    AUTH_URL: standIn.url,
    UPSTREAM_URL: standIn.url,
    CLIENT_ID: '',
    CLIENT_SECRET: '',
    CLIENT_ID_FILE: join(dir, 'id'),
    CLIENT_SECRET_FILE: join(dir, 'secret')
  })
  const statuses: number[] = []
  let rotated = false
  let afterRotation = 0
  while (afterRotation < 50) {
    const res = await request(proxyUrl + '/v2/store/products/LM358BIDR')
    await res.body.dump()
    statuses.push(res.statusCode)
    if (rotated) afterRotation += 1
    if (statuses.length === 50) {
      // Kubernetes updates a mounted secret by swapping it in atomically; the
      // gateway then accepts only the new secret and revokes the old tokens.
      writeFileSync(join(dir, 'secret.new'), 'bmV3LXNlY3JldA==\n')
      renameSync(join(dir, 'secret.new'), join(dir, 'secret'))
      standIn.setClientSecret('bmV3LXNlY3JldA==')
      standIn.revokeAll()
      rotated = true
    }
  }
  t.equal(statuses.length, 100)
  t.same(new Set(statuses), new Set([200]), 'every request succeeded across the rotation')
  t.equal(standIn.tokensIssued(), 2, 'the second token was issued for the new secret')
})
