import { renameSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { request } from 'undici'
import { createCredentialReader } from '../../src/token/credentials.js'
import { build, CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'

t.test('values from files are re-read on every call, trailing newline trimmed', async (t) => {
  const dir = t.testdir({ id: 'id-1\n', secret: 's1\r\n' })
  const read = createCredentialReader({ file: join(dir, 'id') }, { file: join(dir, 'secret') })
  t.same(read(), { clientId: 'id-1', clientSecret: 's1' })
  writeFileSync(join(dir, 'secret'), 's2\n')
  t.same(read(), { clientId: 'id-1', clientSecret: 's2' })
})

t.test('a file whose content cannot be sent fails without repeating it', async (t) => {
  const dir = t.testdir({ secret: 'has&amp\n' })
  const read = createCredentialReader({ value: 'id' }, { file: join(dir, 'secret') })
  const err = t.throws(() => read()) as Error
  t.match(err.message, /^CLIENT_SECRET_FILE: the file's content: character 4 of 7 is an '&'/)
  t.notMatch(err.message, 'has&amp')
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
