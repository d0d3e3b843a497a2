// `idempotency=`, `key=body:FIELD` and `require-key` in RATE_LIMITS: what they mean, and every way to get them wrong.
import t from 'tap'
import { parseRules } from '../../src/config/rate-limit-rules.js'

const parse = (text: string) => parseRules(text, 'RATE_LIMITS')
const problems = (text: string): string[] => parse(text).problems

t.test('idempotency= after the limits, or alone; key= and require-key beside it', async (t) => {
  const { rules, problems: found } = parse('POST /v2/store/orders 5/1s idempotency=24h require-key; POST /v2/store/carts idempotency=1s key=body:order.poNumber; PUT /a idempotency=7d; * /v2/** 5/1s')
  t.same(found, [])
  t.same(rules[0]?.idempotency, { lifetimeMs: 86_400_000, requireKey: true })
  t.same(rules[0]?.limits.map((l) => l.text), ['5/1s'])
  t.same(rules[1]?.idempotency, { lifetimeMs: 1000, requireKey: false, bodyField: 'order.poNumber' })
  t.same(rules[1]?.limits, [], 'a rule with no limits may carry it')
  t.same(rules[2]?.idempotency, { lifetimeMs: 7 * 86_400_000, requireKey: false })
  t.equal(rules[3]?.idempotency, undefined, 'rules without it have none')
  for (const method of ['POST', 'PATCH', 'PUT', 'DELETE']) t.same(problems(`${method} /a idempotency=1m`), [], method)
  t.same(problems('POST /a idempotency=1000ms key=body:a_b-c.d1'), [])
})

t.test('wrong options are named, each with its rule', async (t) => {
  t.same(problems('POST /a idempotency=4x'), ['RATE_LIMITS: rule 1 "POST /a idempotency=4x": idempotency="4x" must be a duration from 1s to 7d (e.g. 24h)'])
  t.match(problems('POST /a idempotency=8d'), [/idempotency="8d" must be a duration from 1s to 7d/])
  t.match(problems('POST /a idempotency=999ms'), [/idempotency="999ms" must be a duration/])
  t.match(problems('POST /a idempotency='), [/idempotency="" must be a duration/])
  t.same(problems('POST /a key=body:x'), ['RATE_LIMITS: rule 1 "POST /a key=body:x": key= and require-key need idempotency= (how long a key holds its answer)'])
  t.match(problems('POST /a require-key'), [/need idempotency=/])
  t.same(problems('POST /a idempotency=1h key=header'), ['RATE_LIMITS: rule 1 "POST /a idempotency=1h key=header": key="header" must be body:FIELD (a JSON body field, e.g. key=body:poNumber)'])
  for (const bad of ['body:', 'body:a..b', 'body:.a', 'body:a.', 'xbody:a', 'body:a$']) {
    t.match(problems(`POST /a idempotency=1h key=${bad}`), [/must be body:FIELD/], bad)
  }
  t.same(problems('POST /a idempotency=1h idempotency=2h'), ['RATE_LIMITS: rule 1 "POST /a idempotency=1h idempotency=2h": repeats idempotency='])
  t.same(problems('POST /a idempotency=1h key=body:a key=body:b'), ['RATE_LIMITS: rule 1 "POST /a idempotency=1h key=body:a key=body:b": repeats key='])
  t.same(problems('POST /a idempotency=1h require-key require-key'), ['RATE_LIMITS: rule 1 "POST /a idempotency=1h require-key require-key": repeats require-key'])
  for (const method of ['GET', 'HEAD', 'OPTIONS', '*']) {
    t.same(problems(`${method} /a idempotency=1h`),
      [`RATE_LIMITS: rule 1 "${method} /a idempotency=1h": idempotency= applies to requests that change something: the rule's method must be POST, PATCH, PUT or DELETE`], method)
  }
  t.match(problems('POST /a'), [/needs at least one limit/])
  t.match(problems('POST /a require-keys'), [/limit "require-keys" is not N\/WINDOW/])
  // From a file, never the text.
  const fromFile = parseRules('POST /a idempotency=secret key=body:sec$ret', 'RATE_LIMITS_FILE (/r)', { fromFile: true }).problems
  t.same(fromFile, [
    'RATE_LIMITS_FILE (/r): line 1 (POST /a): idempotency= must be a duration from 1s to 7d (e.g. 24h)',
    'RATE_LIMITS_FILE (/r): line 1 (POST /a): key= must be body:FIELD (a JSON body field, e.g. key=body:poNumber)'
  ])
})
