import neostandard from 'neostandard'

// The size rule: no file of src/ over 400 lines, no function over 150 with its nested ones
// (so a factory's closures count). The files below broke them when the rule came (2026-12-02,
// the request path's stages done first): each is owed a split, and none may grow meanwhile
// (their own limit is their size then). Take a file off the list once it is split.
const OWED = {
  'src/idempotency/stage.ts': { fn: 181 },
  'src/token/token-manager.ts': { fn: 254 },
  'src/tracing/request.ts': { fn: 216 }
}
const sizes = (lines, fn) => ({
  'max-lines': ['error', { max: lines }],
  'max-lines-per-function': ['error', { max: fn }]
})

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', 'node_modules/**', '.tap/**', 'helm/**', '.stryker-tmp/**', 'reports/**', 'coverage/**'] }),
  {
    rules: {
      // `void promise` marks a promise deliberately not awaited (a background refresh).
      'no-void': ['error', { allowAsStatement: true }]
    }
  },
  { files: ['src/**/*.ts'], rules: sizes(400, 150) },
  ...Object.entries(OWED).map(([file, owed]) => ({ files: [file], rules: sizes(owed.lines ?? 400, owed.fn ?? 150) }))
]
