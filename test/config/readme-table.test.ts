// README.md's configuration table and the schema must list the same variables, with the
// same defaults and the same limits: a variable added to one and not the other fails here.
import { readFileSync } from 'node:fs'
import t from 'tap'
import { schema } from '../../src/config/schema.js'
import { EGRESS_VARIABLES } from '../../src/egress/route.js'

interface Property { type: string, default?: unknown, minimum?: number, maximum?: number, minLength?: number, enum?: readonly string[] }

const README = readFileSync(new URL('../../README.md', import.meta.url), 'utf8')

/** The rows of the table under `## Configuration`: variable → its cells. */
function tableRows (): Map<string, string[]> {
  const section = README.split(/^## /m).find((s) => s.startsWith('Configuration\n')) ?? ''
  const rows = new Map<string, string[]>()
  for (const line of section.split('\n')) {
    const cells = line.split('|').slice(1, -1).map((c) => c.trim())
    const name = /^`([A-Z_]+)`(?: ²)?$/.exec(cells[0] ?? '')?.[1]
    if (name !== undefined) rows.set(name, cells.slice(1))
  }
  return rows
}

/** The default as the table shows it: the value in backticks, or `required`/`—` for none. */
function defaultCell (p: Property): string | undefined {
  return p.default === undefined ? undefined : `\`${String(p.default)}\``
}

/** The limits as the table shows them. */
function limitsCell (p: Property): string {
  if (p.enum !== undefined) return p.enum.map((v) => `\`${v}\``).join(', ')
  if (p.minimum !== undefined && p.maximum !== undefined) return `${p.minimum}–${p.maximum}`
  if (p.minimum !== undefined) return `≥ ${p.minimum}`
  if (p.minLength !== undefined) return 'not empty'
  return '—'
}

const properties = schema.properties as Record<string, Property>
const rows = tableRows()

t.test('the table lists every variable of the schema and the standard proxy variables, and nothing else', async (t) => {
  t.ok(rows.size > 10, 'the README has a configuration table')
  t.same([...rows.keys()].sort(), [...Object.keys(properties), ...EGRESS_VARIABLES].sort())
})

t.test('each row shows the schema\'s default and limits', async (t) => {
  for (const [name, property] of Object.entries(properties)) {
    const [, def, limits] = rows.get(name) ?? []
    const expected = defaultCell(property)
    if (expected === undefined) t.match(def, /^(required|—)/, `${name} has no default`)
    else t.equal(def, expected, `${name} defaults to ${expected}`)
    t.equal(limits, limitsCell(property), `${name}'s limits`)
  }
})
