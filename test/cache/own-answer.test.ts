// Which requests' fetches may get an answer of their own (src/cache/policy.ts asksForItsOwn):
// a part (Range) or a condition. TI's refusal of such a fetch (a 416, a 412) is not every
// waiter's; any other request's is.
import t from 'tap'
import { asksForItsOwn } from '../../src/cache/policy.js'

const OWN = ['range', 'if-range', 'if-match', 'if-none-match', 'if-modified-since', 'if-unmodified-since']

t.test('a part or a condition, alone or among other headers, makes the answer its own', async (t) => {
  for (const name of OWN) {
    t.equal(asksForItsOwn({ [name]: 'x' }), true, name)
    t.equal(asksForItsOwn({ accept: 'application/json', [name]: 'x', 'accept-language': 'de' }), true, `${name} among others`)
    t.equal(asksForItsOwn({ [name]: '' }), true, `${name}, even empty`)
  }
  t.equal(asksForItsOwn({ range: 'bytes=0-9', 'if-range': '"v1"' }), true, 'a part and its condition')
})

t.test('no part and no condition: the answer is every waiter\'s', async (t) => {
  t.equal(asksForItsOwn({}), false, 'no headers')
  t.equal(asksForItsOwn({ accept: 'application/json', 'cache-control': 'no-cache', 'x-range': 'a', ifmatch: 'b' }), false, 'others, and names alike')
  t.equal(asksForItsOwn({ range: undefined, 'if-match': undefined }), false, 'fields present only as undefined')
})
