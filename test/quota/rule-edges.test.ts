// RATE_LIMITS at its edges: words that almost parse, rules with several problems (each
// said once), which earlier rules hide a later one, and patterns that must not match
// requests shorter or longer than they are.
import t from 'tap'
import { matchRule, parseRules } from '../../src/config/rate-limit-rules.js'

const problemsOf = (text: string): string[] => parseRules(text, 'RATE_LIMITS').problems
const idsOf = (text: string): string[] => parseRules(text, 'RATE_LIMITS').rules.map((r) => r.id)

t.test('a method is all of its word, upper case', async (t) => {
  t.same(problemsOf('gET /x 1/s; GEt /y 1/s'), [
    'RATE_LIMITS: rule 1 "gET /x 1/s": method "gET" must be an upper-case HTTP method or *',
    'RATE_LIMITS: rule 2 "GEt /y 1/s": method "GEt" must be an upper-case HTTP method or *'
  ])
})

t.test('a limit is all of its word: 1/4h30m is not 1/4h, 5/1sx not 5/1s', async (t) => {
  t.match(problemsOf('GET /x 1/4h30m; GET /y 5/1sx'), [
    /^RATE_LIMITS: rule 1 "GET \/x 1\/4h30m": limit "1\/4h30m" is not N\/WINDOW/,
    /^RATE_LIMITS: rule 2 "GET \/y 5\/1sx": limit "5\/1sx" is not N\/WINDOW/
  ])
})

t.test('an option is all of its word: xcache=4h is a bad limit, not cache=', async (t) => {
  t.match(problemsOf('GET /x 1/s xcache=4h'), [/^RATE_LIMITS: rule 1 "GET \/x 1\/s xcache=4h": limit "xcache=4h" is not N\/WINDOW/])
})

t.test('a path without a query: ? is refused (# begins a comment)', async (t) => {
  t.same(problemsOf('GET /x?currency=USD 1/s'), ['RATE_LIMITS: rule 1 "GET /x?currency=USD 1/s": path "/x?currency=USD" must not contain ? or #'])
})

t.test('a rule of a method alone: its path and its limits are missing', async (t) => {
  t.same(problemsOf('GET'), [
    'RATE_LIMITS: rule 1 "GET": path "" must start with /',
    'RATE_LIMITS: rule 1 "GET": needs at least one limit (METHOD PATH N/WINDOW [N/WINDOW ...] [cache=DURATION [stale=DURATION]])'
  ])
})

t.test('a rule with problems of its own is not also called a repeat, or hidden', async (t) => {
  t.same(problemsOf('GET /z 1/s; GET /z 5/q'), ['RATE_LIMITS: rule 2 "GET /z 5/q": limit "5/q" is not N/WINDOW (e.g. 5/1s, 1/4h, 5/s; units ms, s, m, h, d)'])
  t.same(problemsOf('* /v2/** 1/s; GET /v2/x 5/q'), ['RATE_LIMITS: rule 2 "GET /v2/x 5/q": limit "5/q" is not N/WINDOW (e.g. 5/1s, 1/4h, 5/s; units ms, s, m, h, d)'])
})

t.test('hidden rules: an earlier * hides a later literal of the same length, never a longer, shorter or wider one', async (t) => {
  t.match(problemsOf('* /v2/store/orders/* 1/s; GET /v2/store/orders/42 1/s'), [/rule 2 "GET \/v2\/store\/orders\/42 1\/s": is hidden by the earlier rule \* \/v2\/store\/orders\/\*/])
  t.same(idsOf('* /a/b 1/s; * /a/b/c 1/s'), ['* /a/b', '* /a/b/c'], 'a longer pattern is not hidden')
  t.same(idsOf('* /a/*/** 1/s; * /a 1/s'), ['* /a/*/**', '* /a'], '/a/*/** needs two segments: /a is not hidden')
  t.same(idsOf('* /a/* 1/s; * /a/** 1/s'), ['* /a/*', '* /a/**'], '** matches more than *: not hidden')
  t.same(idsOf('* /a/b 1/s; * /a/* 1/s'), ['* /a/b', '* /a/*'], '* matches more than b: not hidden')
})

t.test('matching: no longer, no shorter than the pattern; GET covers HEAD, no other method does', async (t) => {
  const { rules } = parseRules('GET /v2/store/products/catalog 1/4h; GET /a/*/** 1/s; POST /v2/orders 1/s', 'RATE_LIMITS')
  t.equal(matchRule(rules, 'GET', '/v2/store/products/catalog/reviews'), undefined, 'a longer path')
  t.equal(matchRule(rules, 'GET', '/a'), undefined, '/a/*/** needs two segments')
  t.equal(matchRule(rules, 'GET', '/a/b')?.id, 'GET /a/*/**')
  t.equal(matchRule(rules, 'HEAD', '/v2/orders'), undefined, 'a POST rule does not count HEAD')
  t.equal(matchRule(rules, 'HEAD', '/v2/store/products/catalog')?.id, 'GET /v2/store/products/catalog')
})
