import neostandard from 'neostandard'

// The size rule: no file of src/ over 400 lines, no function over 150 with its nested ones
// (so a factory's closures count).
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
  { files: ['src/**/*.ts'], rules: sizes(400, 150) }
]
