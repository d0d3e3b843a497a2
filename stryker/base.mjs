// Shared StrykerJS settings. Each area (token.config.mjs, quota.config.mjs, ...) mutates
// its own src/ files against the tests that own them, so a run stays within the hour.
//
// The tap runner starts each test file with plain `node`, not with tap. Node strips the
// types itself, as `npm test` does (.taprc): test/helpers/ts-resolve.mjs, loaded through
// nodeArgs, maps `./x.js` imports to `x.ts`, so a mutant needs no build and a test file
// starts in half the time ts-node took (token-manager.test.ts: 1.05 s with ts-node,
// 0.45 s stripped). Types are checked once per mutant by the TypeScript checker instead
// (mutants that do not compile are not run).
//
// Incremental mode: reports/mutation/<area>.incremental.json is committed, so a run
// re-tests only the mutants whose code or covering tests changed since that report
// (the tap runner's "test" is a whole file: changing a test file re-tests every mutant
// it covers; a new test file re-tests only what nobody killed). After a full run,
// commit the area's incremental file. The html and json reports beside it are not
// committed (.gitignore keeps the html out; the json is the run's full detail).
//
//   npm run mutation:token                 one area (token, quota-rules, quota-fleet,
//                                          forwarding, config, cache; mutation:quota: both quota areas)
//   npm run mutation                       every area, one after another
//   nice -n 15 npm run mutation:token -- --concurrency 2    on a machine of your own
//
// Each script runs stryker/run-area.sh, which trims the mutants' reasons in the incremental
// report afterwards (stryker/trim-report.mjs): a killed mutant's reason is its first failing
// assertion, whole, and one quota test's made a 47 MB report.
//
// A full token run took over an hour on two shared cores: each mutant starts node
// with the TypeScript loader for every test file that covers it.
/**
 * @param {string} name
 * @param {{ mutate: string[], testFiles: string[], breakAt: number | null }} settings
 * @returns {import('@stryker-mutator/api/core').PartialStrykerOptions}
 */
export function area (name, { mutate, testFiles, breakAt }) {
  return {
    $schema: '../node_modules/@stryker-mutator/core/schema/stryker-schema.json',
    packageManager: 'npm',
    testRunner: 'tap',
    tap: {
      testFiles,
      nodeArgs: ['--import', './test/helpers/ts-resolve.mjs'],
      forceBail: true
    },
    checkers: ['typescript'],
    tsconfigFile: 'tsconfig.json',
    typescriptChecker: { prioritizePerformanceOverAccuracy: true },
    coverageAnalysis: 'perTest',
    mutate,
    // Only what the tests import: no build output, no reports, no other helpers' caches.
    ignorePatterns: ['.stryker-tmp', 'dist', 'dist-soak', 'coverage', '.tap', 'reports', 'bench/results', 'helm', 'deploy', 'soak', 'bench'],
    incremental: true,
    incrementalFile: `reports/mutation/${name}.incremental.json`,
    reporters: ['clear-text', 'progress-append-only', 'html', 'json'],
    htmlReporter: { fileName: `reports/mutation/${name}.html` },
    jsonReporter: { fileName: `reports/mutation/${name}.json` },
    thresholds: { high: Math.min(100, Math.max(90, (breakAt ?? 0) + 2)), low: breakAt ?? 60, break: breakAt },
    // The machine is shared: one test process at a time unless told otherwise
    // (`--concurrency N` on the command line overrides this).
    concurrency: 1,
    // Each test run starts a node process and transpiles: on a busy machine that alone
    // takes seconds, and a run cut off by the timeout would count as a kill.
    timeoutMS: 30_000,
    timeoutFactor: 2.5,
    // The initial run of an area's test files, one after another, takes about a minute at rest;
    // beside three busy processes quota-rules' took over Stryker's default 5 minutes.
    dryRunTimeoutMinutes: 15,
    tempDirName: `.stryker-tmp/${name}`,
    cleanTempDir: 'always'
  }
}
