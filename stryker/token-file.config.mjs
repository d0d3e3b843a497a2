// One token source file against its own unit test file: a quick run (minutes, not an
// hour) while working on that file. The area run (token.config.mjs) is the reference.
//   TOKEN_FILE=token-client npx stryker run stryker/token-file.config.mjs
import { area } from './base.mjs'

const file = process.env.TOKEN_FILE ?? 'token-manager'

export default area(`token-${file}`, {
  mutate: [`src/token/${file}.ts`],
  testFiles: [`test/token/${file}.test.ts`],
  breakAt: null
})
