// The chart's PrometheusRule, tested for real: rendered (test/deploy/chart-helm.ts), its
// groups written as a Prometheus rules file, then `promtool check rules` and `promtool test
// rules` with test/fixtures/prometheus-rules.test.yaml, whose series make every alert fire
// for one sidecar and stay silent for the others (the quota guard's and the read cache's
// alerts too). promtool comes from Debian's or Homebrew's `prometheus` package; without it
// the file is skipped with one line saying so (test/helpers/tools.ts).
import { spawnSync } from 'node:child_process'
import { copyFileSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import type { Test } from 'tap'
import { parse } from 'yaml'
import { CHART, ROOT, one, render, type JsonObject } from './chart-helm.js'
import { MONITORING } from './chart-expect.js'
import { tempDir } from '../helpers/temp-dir.js'
import { PROMTOOL, skipFileUnless } from '../helpers/tools.js'

skipFileUnless(t, PROMTOOL)
t.setTimeout(120_000)

const FIXTURE = join(ROOT, 'test/fixtures/prometheus-rules.test.yaml')

function promtool (args: string[], cwd: string): { status: number | null, output: string } {
  const out = spawnSync('promtool', args, { cwd, encoding: 'utf8', timeout: 60_000 })
  if (out.error !== undefined) {
    throw new Error(`promtool: ${out.error.message} (${PROMTOOL.install})`)
  }
  return { status: out.status, output: out.stdout + out.stderr }
}

/** The chart's rules, rendered with these extra flags, as a rules file next to the unit tests. */
async function rulesDir (flags: string[] = []): Promise<{ dir: string, groups: JsonObject[] }> {
  const objects = await render(['r', CHART, '--set', 'credentials.existingSecret=creds', '--set', 'metrics.prometheusRule.enabled=true', ...MONITORING, ...flags])
  const groups = (one(objects, 'PrometheusRule').spec as JsonObject).groups as JsonObject[]
  const dir = tempDir('store-auth-proxy-rules-')
  writeFileSync(join(dir, 'rules.yaml'), JSON.stringify({ groups }, null, 2))
  copyFileSync(FIXTURE, join(dir, 'rules.test.yaml'))
  return { dir, groups }
}

t.test('the rendered rules pass promtool check and the unit tests, firing and not firing', async (t) => {
  const { dir, groups } = await rulesDir()
  const check = promtool(['check', 'rules', 'rules.yaml'], dir)
  t.equal(check.status, 0, check.output)
  const test = promtool(['test', 'rules', 'rules.test.yaml'], dir)
  t.equal(test.status, 0, test.output)
  t.match(test.output, /SUCCESS/)

  // Every alert is tested firing (exp_alerts listed) and silent (an empty list, or other
  // sidecars in the same series that exp_alerts leaves out: promtool compares exactly).
  const alerts = groups.flatMap((g) => (g.rules as JsonObject[]).map((r) => String(r.alert)))
  t.same(alerts.sort(), [
    'StoreAuthProxyBudgetNearlySpent', 'StoreAuthProxyCredentialsRejected', 'StoreAuthProxyErrorAnswers', 'StoreAuthProxyFleetLargerThanDeclared', 'StoreAuthProxyNoValidToken',
    'StoreAuthProxyOrderOutcomeUnknown',
    'StoreAuthProxyRateLimitRedisDown', 'StoreAuthProxyServingStale', 'StoreAuthProxyShedding', 'StoreAuthProxyTokenEndpointFailing',
    'StoreAuthProxyTokenExpiringSoon', 'StoreAuthProxyUpstream5xx', 'StoreAuthProxyUpstreamRateLimited'
  ])
  const cases = (parse(readFileSync(FIXTURE, 'utf8')) as { tests: Array<{ alert_rule_test: Array<{ alertname: string, exp_alerts: unknown[] }> }> })
    .tests.flatMap((test) => test.alert_rule_test)
  for (const alert of alerts) {
    t.ok(cases.some((c) => c.alertname === alert && c.exp_alerts.length > 0), `${alert} is tested firing`)
  }
})

/** The unit tests, on the rules rendered with these flags, fail and name the alert that is off. */
async function caught (t: Test, flags: string[], alert: string): Promise<void> {
  const { dir } = await rulesDir(flags)
  const run = promtool(['test', 'rules', 'rules.test.yaml'], dir)
  t.not(run.status, 0, `${flags.join(' ')}: the unit tests fail`)
  t.match(run.output, alert, `${flags.join(' ')}: they name ${alert}`)
}

t.test('the unit tests catch a rule that is off: a higher 5xx threshold, a longer expiry warning', async (t) => {
  await caught(t, ['--set-json', 'metrics.prometheusRule.upstream5xxRatio=0.2'], 'StoreAuthProxyUpstream5xx')
  await caught(t, ['--set', 'metrics.prometheusRule.tokenExpiryWarningMinutes=1'], 'StoreAuthProxyTokenExpiringSoon')
})

t.test('the unit tests catch a quota alert that is off: a longer Redis outage, a longer rate-limited spell', async (t) => {
  await caught(t, ['--set', 'metrics.prometheusRule.redisDownMinutes=10'], 'StoreAuthProxyRateLimitRedisDown')
  await caught(t, ['--set', 'metrics.prometheusRule.upstreamRateLimitedMinutes=30'], 'StoreAuthProxyUpstreamRateLimited')
  await caught(t, ['--set', 'metrics.prometheusRule.fleetLargerMinutes=20'], 'StoreAuthProxyFleetLargerThanDeclared')
})

t.test('the unit tests catch the stale-answers alert with another delay: later or earlier than the series say', async (t) => {
  await caught(t, ['--set', 'metrics.prometheusRule.servingStaleMinutes=20'], 'StoreAuthProxyServingStale')
  await caught(t, ['--set', 'metrics.prometheusRule.servingStaleMinutes=10'], 'StoreAuthProxyServingStale')
  await caught(t, ['--set', 'metrics.prometheusRule.sheddingMinutes=5'], 'StoreAuthProxyShedding')
  await caught(t, ['--set', 'metrics.prometheusRule.sheddingMinutes=15'], 'StoreAuthProxyShedding')
})

t.test('the unit tests catch a budget alert that is off: a higher share spent, a longer wait', async (t) => {
  await caught(t, ['--set-json', 'metrics.prometheusRule.budgetSpentRatio=0.9'], 'StoreAuthProxyBudgetNearlySpent')
  await caught(t, ['--set', 'metrics.prometheusRule.budgetSpentMinutes=10'], 'StoreAuthProxyBudgetNearlySpent')
})
