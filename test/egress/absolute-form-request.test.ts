import t from 'tap'
import { absoluteFormRequest } from '../../src/egress/connection.js'

// The rewrite for the absolute form, whatever shape the request's headers have: the path
// becomes the target's URL, Proxy-Authorization is added, nothing else changes. Pure.

const form = { prefix: 'http://store.ti.test:8080', authorization: 'Basic ZTpw' }

t.test('each header shape keeps its headers and gains Proxy-Authorization', async (t) => {
  const cases: Array<[string, unknown, unknown]> = [
    ['none', undefined, ['proxy-authorization', 'Basic ZTpw']],
    ['a flat list, repeats kept', ['X-A', '1', 'x-a', '2'], ['X-A', '1', 'x-a', '2', 'proxy-authorization', 'Basic ZTpw']],
    ['an object', { 'x-a': ['1', '2'] }, { 'x-a': ['1', '2'], 'proxy-authorization': 'Basic ZTpw' }],
    ['an iterable of pairs', new Map([['x-a', '1']]), [['x-a', '1'], ['proxy-authorization', 'Basic ZTpw']]]
  ]
  for (const [name, headers, want] of cases) {
    const out = absoluteFormRequest({ method: 'GET', path: '/v2/store/orders?x=1', headers: headers as never }, form)
    t.equal(out.path, 'http://store.ti.test:8080/v2/store/orders?x=1', `${name}: path`)
    t.same(out.headers, want, `${name}: headers`)
  }
})

t.test('without credentials, the headers are left as they are', async (t) => {
  const headers = ['X-A', '1']
  const out = absoluteFormRequest({ method: 'POST', path: '/v1/oauth/accesstoken', headers, body: 'x' }, { prefix: 'http://ti.test', authorization: undefined })
  t.equal(out.headers, headers)
  t.equal(out.path, 'http://ti.test/v1/oauth/accesstoken')
  t.equal(out.body, 'x')
})
