// The key of a request (header or body field) and its fingerprint: table-driven, no I/O.
import t from 'tap'
import { bodyKey, fingerprint, headerKey, keyId, MAX_KEY_LENGTH } from '../../src/idempotency/key.js'

t.test('Idempotency-Key is a structured-field string; a bare token is read as the same key', async (t) => {
  const cases: Array<[string[], unknown]> = [
    [['Idempotency-Key', '"8e03978e-40d5-43e8-bc93-6894a57f9324"'], { key: '8e03978e-40d5-43e8-bc93-6894a57f9324' }],
    [['idempotency-key', '  "a b"  '], { key: 'a b' }],
    [['IDEMPOTENCY-KEY', '"q\\"uote\\\\"'], { key: 'q"uote\\' }],
    [['Idempotency-Key', 'abc-123_.~:+/='], { key: 'abc-123_.~:+/=' }],
    [['Other', '"x"'], { missing: true }],
    [[], { missing: true }],
    [['Idempotency-Key', '"a"', 'Idempotency-Key', '"a"'], { problem: 'the request carries more than one Idempotency-Key header' }],
    [['Idempotency-Key', '""'], { problem: 'Idempotency-Key must not be empty' }],
    [['Idempotency-Key', ''], { problem: /structured-field string/ }],
    [['Idempotency-Key', '"open'], { problem: /structured-field string/ }],
    [['Idempotency-Key', '"a"b'], { problem: /structured-field string/ }],
    [['Idempotency-Key', '"a\\x"'], { problem: /structured-field string/ }],
    [['Idempotency-Key', '"a\\'], { problem: /structured-field string/ }],
    [['Idempotency-Key', '"tab\t"'], { problem: /structured-field string/ }],
    [['Idempotency-Key', '"é"'], { problem: /structured-field string/ }],
    [['Idempotency-Key', 'a b'], { problem: /structured-field string/ }],
    [['Idempotency-Key', `"${'k'.repeat(MAX_KEY_LENGTH)}"`], { key: 'k'.repeat(MAX_KEY_LENGTH) }],
    [['Idempotency-Key', `"${'k'.repeat(MAX_KEY_LENGTH + 1)}"`], { problem: 'Idempotency-Key must be at most 255 characters' }]
  ]
  for (const [raw, expected] of cases) t.match(headerKey(raw), expected, raw.join(': '))
})

t.test('a key from a JSON body field: a string or a number at a dotted path', async (t) => {
  const cases: Array<[string | null, string, unknown]> = [
    ['{"poNumber":"PO-1"}', 'poNumber', { key: 'PO-1' }],
    ['{"order":{"po":42}}', 'order.po', { key: '42' }],
    ['{"order":{"po":{"x":1}}}', 'order.po', { missing: true }],
    ['{"order":[1]}', 'order.0', { missing: true }],
    ['{"po":null}', 'po', { missing: true }],
    ['{"po":1e999}', 'po', { missing: true }],
    ['{"po":""}', 'po', { problem: 'Idempotency-Key must not be empty' }],
    ['[1]', 'po', { missing: true }],
    ['not json', 'po', { missing: true }],
    ['', 'po', { missing: true }],
    [null, 'po', { missing: true }]
  ]
  for (const [body, field, expected] of cases) {
    t.same(bodyKey(body === null ? null : Buffer.from(body), field), expected, `${String(body)} ${field}`)
  }
})

t.test('fingerprints differ by method, target and body; key ids by rule and key', async (t) => {
  const base = fingerprint('POST', '/o', Buffer.from('{}'))
  t.equal(fingerprint('POST', '/o', Buffer.from('{}')), base)
  t.not(fingerprint('PUT', '/o', Buffer.from('{}')), base)
  t.not(fingerprint('POST', '/o?x', Buffer.from('{}')), base)
  t.not(fingerprint('POST', '/o', Buffer.from('{ }')), base)
  t.not(fingerprint('POST', '/o', null), fingerprint('POST', '/o', Buffer.from('x')))
  t.equal(fingerprint('POST', '/o', null), fingerprint('POST', '/o', Buffer.alloc(0)))
  t.equal(keyId('POST /o', 'k'), keyId('POST /o', 'k'))
  t.not(keyId('POST /o', 'k'), keyId('POST /p', 'k'))
  t.not(keyId('POST /o', 'k'), keyId('POST /o', 'k2'))
  t.notMatch(keyId('POST /o', 'secret-key'), 'secret')
})
