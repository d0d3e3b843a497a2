// `help config` lists every variable the sidecar reads, with its default and one line on what
// it does: the configuration table where README.md is not (the image holds only dist/).
import t from 'tap'
import { MEANINGS, variablesHelp } from '../../src/cli/variables.js'
import { schema } from '../../src/config/schema.js'
import { EGRESS_VARIABLES } from '../../src/egress/route.js'
import { runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'

const VARIABLES = [...Object.keys(schema.properties), ...EGRESS_VARIABLES]

t.test('every variable has a meaning, and nothing else does', async (t) => {
  t.same(Object.keys(MEANINGS).sort(), [...VARIABLES].sort())
  for (const [name, meaning] of Object.entries(MEANINGS)) t.ok(meaning.length > 10 && !meaning.includes('\n'), `${name}: one line`)
})

t.test('help config: each variable on its line with its default, required, or none', async (t) => {
  const text = variablesHelp()
  const lines = text.split('\n').filter((line) => /^ {2}[A-Z_]+ /.test(line))
  t.same(lines.map((line) => line.trim().split(/\s+/)[0]), VARIABLES, 'in the schema\'s order, then the proxy variables')
  t.match(text, /^ {2}PORT +8080 +proxy listener port$/m)
  t.match(text, /^ {2}AUTH_URL +required +base URL of TI's OAuth API/m)
  t.match(text, /^ {2}CLIENT_SECRET_FILE +- +a file holding the secret/m)
  t.match(text, /^ {2}LOG_FORMAT +auto +json for collectors/m)
  t.match(text, /^ {2}NO_PROXY +- +targets sent direct/m)
  t.match(text, /"check-config" checks them all/)
})

// The command line itself runs as the built process (src/cli/commands.ts is loaded by main.ts).
t.test('--help points to help config; help config prints the list and exits 0', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const usage = runMain(t, ['--help'], {})
  const list = runMain(t, ['help', 'config'], {})
  t.same(await Promise.all([usage.exited, list.exited]), [0, 0])
  t.match(usage.stdout(), /"help config" lists each with its default\nand meaning/)
  t.equal(list.stdout(), variablesHelp())
})
