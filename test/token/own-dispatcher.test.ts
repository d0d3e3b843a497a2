// The token client never asks through undici's global dispatcher (every listener bounded, case 3): without a
// dispatcher given it uses an Agent of its own, so NODE_USE_ENV_PROXY or a module calling
// setGlobalDispatcher() cannot reroute the token request; one given is used as given.
import t from 'tap'
import { Agent, getGlobalDispatcher, setGlobalDispatcher, type Dispatcher } from 'undici'
import { createTokenClient } from '../../src/token/token-client.js'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'

const credentials = () => ({ clientId: CLIENT_ID, clientSecret: CLIENT_SECRET })

/** An Agent that counts what it dispatches, and passes it on. */
class Recording extends Agent {
  dispatched: string[] = []
  override dispatch (options: Dispatcher.DispatchOptions, handler: Dispatcher.DispatchHandler): boolean {
    this.dispatched.push(`${String(options.origin)}${options.path}`)
    return super.dispatch(options, handler)
  }
}

t.test('no dispatcher given: not the global one', async (t) => {
  const standIn = await startStandIn(t)
  const before = getGlobalDispatcher()
  const global = new Recording()
  setGlobalDispatcher(global)
  t.teardown(async () => {
    setGlobalDispatcher(before)
    await global.close()
  })
  const token = await createTokenClient({ authUrl: standIn.url, timeoutMs: 5000, credentials })()
  t.ok(token.accessToken.length > 0, 'a token')
  t.same(global.dispatched, [], 'nothing through the global dispatcher')
})

t.test('a dispatcher given carries the request', async (t) => {
  const standIn = await startStandIn(t)
  const own = new Recording()
  t.teardown(() => own.close())
  await createTokenClient({ authUrl: standIn.url, timeoutMs: 5000, credentials, dispatcher: own })()
  t.same(own.dispatched, [`${standIn.url}/v1/oauth/accesstoken`])
})
