// A token request that fails in a way the client did not foresee (a bug, a library's own
// error) is a network error, retried with a backoff; the log and /status say what kind of
// error it was (its class and code) and never its message, which may quote the token answer.
import t from 'tap'
import { kindOf } from '../../src/token/token-manager.js'
import { manager } from './scripted-manager.js'

const SECRET_IN_MESSAGE = 'Unexpected token in JSON at position 17: {"access_token":"sEcReT'

t.test('the log and /status name the error\'s class and code, not its message', async (t) => {
  const cases: Array<[unknown, string]> = [
    [new SyntaxError(SECRET_IN_MESSAGE), 'SyntaxError'],
    [Object.assign(new Error(SECRET_IN_MESSAGE), { code: 'ERR_INVALID_STATE' }), 'Error ERR_INVALID_STATE'],
    [SECRET_IN_MESSAGE, 'string']
  ]
  for (const [thrown, kind] of cases) {
    const fetchToken = async (): Promise<never> => { throw thrown }
    const { tokens, logs } = manager(t, [], { fetchToken })
    await tokens.start()
    const reason = `token request failed unexpectedly (${kind})`
    t.match(tokens.state(), { lastFailure: 'network_error', lastFailureReason: reason }, kind)
    t.equal(logs.entries().find((e) => e.msg === 'token request failed')?.reason, reason, kind)
    t.notMatch(JSON.stringify(logs.entries()) + JSON.stringify(tokens.state()), 'sEcReT', `${kind}: the message is not repeated`)
  }
})

t.test('a class or code that is not a plain identifier of at most 64 characters is not repeated either', async (t) => {
  const named = (name: string, code?: unknown): Error => Object.assign(new Error('m'), { name, code })
  t.equal(kindOf(named('TypeError')), 'TypeError')
  t.equal(kindOf(named('_X1')), '_X1')
  t.equal(kindOf(named('A'.repeat(64))), 'A'.repeat(64))
  for (const name of ['A'.repeat(65), 'token sEcReT', '1Error', '', 'Error\nsEcReT', ' TypeError']) t.equal(kindOf(named(name)), 'Error', JSON.stringify(name))
  t.equal(kindOf(named('Error', 'ECONNRESET')), 'Error ECONNRESET')
  for (const code of [42, 'sEcReT value', '', undefined, 'A'.repeat(65)]) t.equal(kindOf(named('Error', code)), 'Error', JSON.stringify(code))
  t.equal(kindOf(undefined), 'undefined')
  t.equal(kindOf({ message: 'sEcReT' }), 'object')
})
