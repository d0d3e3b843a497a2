import neostandard from 'neostandard'

export default [
  ...neostandard({ ts: true, ignores: ['dist/**', 'node_modules/**', '.tap/**', 'helm/**', '.stryker-tmp/**', 'reports/**', 'coverage/**'] }),
  {
    rules: {
      // `void promise` marks a promise deliberately not awaited (a background refresh).
      'no-void': ['error', { allowAsStatement: true }]
    }
  }
]
