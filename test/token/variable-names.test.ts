// What an operator reads names the variables that hold the credentials, whatever else is set.
import t from 'tap'
import { createCredentialReader } from '../../src/token/credentials.js'
import { TokenRequestError } from '../../src/token/token-client.js'
import { HOUR, manager } from './scripted-manager.js'

t.test('by default the ERROR for rejected credentials names CLIENT_ID and CLIENT_SECRET', async (t) => {
  const rejected = { error: new TokenRequestError('rejected', 'rejected', { statusCode: 401, oauthError: 'invalid_client' }) }
  const { tokens, clock, logs } = manager(t, [rejected, rejected, { lifetimeMs: HOUR }], { rejectedRetryMs: 1000 })
  await tokens.start()
  await clock.tick(1)
  t.match(logs.entries().filter((e) => e.level === 50), [{
    credentials: ['CLIENT_ID', 'CLIENT_SECRET'],
    msg: 'token endpoint rejected the client credentials; check CLIENT_ID and CLIENT_SECRET'
  }])
})

t.test('an unreadable credential file is named by its variable: CLIENT_ID_FILE or CLIENT_SECRET_FILE', async (t) => {
  const problem = 'cannot read /dev/zero: it is a character device, not a regular file'
  const id = await createCredentialReader({ file: '/dev/zero' }, { value: 's' })().catch((e: unknown) => e) as Error
  t.equal(id.message, `CLIENT_ID_FILE: ${problem}`)
  const secret = await createCredentialReader({ value: 'id' }, { file: '/dev/zero' })().catch((e: unknown) => e) as Error
  t.equal(secret.message, `CLIENT_SECRET_FILE: ${problem}`)
})
