import t from 'tap'
import { requestTargetProblem } from '../../src/http/rules.js'

// Request targets refused whatever else they contain: the cases a target with no dot and
// no percent sign (which skips the decoding) must still meet, and the four-byte overlong
// form on its own.

t.test('a fragment is never part of a request target', async (t) => {
  t.match(requestTargetProblem('/v2/store/products#x'), /fragment/)
  t.match(requestTargetProblem('/x?q=1#y'), /fragment/)
})

t.test('a backslash is refused in a path with no dot and no escape too', async (t) => {
  t.match(requestTargetProblem('/a\\b'), /backslash/)
  t.match(requestTargetProblem('/\\\\evil'), /backslash/)
})

t.test('a four-byte overlong UTF-8 form is refused on its own', async (t) => {
  t.match(requestTargetProblem('/a/%F0%8F%BF%BF'), /overlong/)
  t.match(requestTargetProblem('/a/%f0%8f%bf%bf'), /overlong/)
})
