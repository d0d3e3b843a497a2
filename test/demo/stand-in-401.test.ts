// The stand-in's 401s say what Apigee says: a request without a bearer token is told its token
// is invalid (not "expired", which would send someone looking for a clock problem); an unknown
// or expired token is told it expired.
import t from 'tap'
import { request } from 'undici'
import { startStandIn } from '../helpers/build.js'

const PRODUCT = '/v2/store/products/LM358BIDR'

t.test('no bearer token: 401 "Invalid access token"; an unknown one: 401 "Access Token expired"', async (t) => {
  const standIn = await startStandIn(t)
  const fault = async (authorization?: string): Promise<unknown> => {
    const res = await request(standIn.url + PRODUCT, authorization === undefined ? {} : { headers: { authorization } })
    t.equal(res.statusCode, 401, authorization ?? 'none')
    return await res.body.json()
  }
  const missing = { fault: { faultstring: 'Invalid access token', detail: { errorcode: 'oauth.v2.InvalidAccessToken' } } }
  t.same(await fault(), missing, 'no Authorization')
  t.same(await fault('Basic Y2FsbGVyOnBhc3M='), missing, 'not a bearer token')
  t.same(await fault('Bearer'), missing, 'a bearer without a token')
  t.same(await fault('Bearer not-issued'), { fault: { faultstring: 'Access Token expired', detail: { errorcode: 'keymanagement.service.access_token_expired' } } })
})
