// HOST and ADMIN_HOST may write an IPv6 literal as a URL writes it, `[::1]`: check-config
// accepts that, so the sidecar must listen there too, and the container healthcheck must find
// it (test/config/whole-values.test.ts: brackets come in pairs or not at all, and listen() gets
// what is inside them).
import t from 'tap'
import { request } from 'undici'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { runMain } from '../helpers/process.js'

t.test('HOST=[::1] and ADMIN_HOST=[::1]: both listeners on ::1, the proxy forwards, the healthcheck finds /readyz', async (t) => {
  const standIn = await startStandIn(t)
  const env = { AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url, CLIENT_ID, CLIENT_SECRET }
  const running = runMain(t, [], { ...env, HOST: '[::1]', PORT: '0', ADMIN_HOST: '[::1]', ADMIN_PORT: '0' })
  const admin = await running.waitFor(/"listener":"admin","msg":"Server listening at http:\/\/\[::1\]:(\d+)"/)
  const proxy = await running.waitFor(/"listener":"proxy","msg":"Server listening at http:\/\/\[::1\]:(\d+)"/)
  await running.waitFor(/access token acquired/)

  const res = await request(`http://[::1]:${proxy[1] ?? ''}/v2/store/products`)
  t.equal(res.statusCode, 200, 'forwarded with the token')
  await res.body.dump()

  const check = runMain(t, ['healthcheck'], { ADMIN_HOST: '[::1]', ADMIN_PORT: admin[1] ?? '' })
  t.equal(await check.exited, 0, check.stderr())
  t.equal(check.stdout(), `healthy: http://[::1]:${admin[1] ?? ''}/readyz answered 200\n`)
})
