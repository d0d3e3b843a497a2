// The Helm chart's source files: its YAML parses the same way under YAML 1.1 (Helm) and 1.2,
// the templates only use values that exist, and every value is used, commented and listed
// in docs/kubernetes.md. Rendering, validation against Kubernetes' schemas and the guards are
// tested on real renders in chart-render, chart-switches and chart-embedding.test.ts.
import { readdirSync, readFileSync } from 'node:fs'
import { join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'
import { isMap, isScalar, parseAllDocuments, parseDocument, type Pair, type YAMLMap } from 'yaml'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))
const CHART = join(ROOT, 'helm/store-auth-proxy')
const read = (path: string): string => readFileSync(path, 'utf8')

function filesUnder (dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((entry) => entry.isFile())
    .map((entry) => join(entry.parentPath, entry.name))
    .sort()
}

const TEMPLATES = filesUnder(join(CHART, 'templates'))
const TEMPLATE_TEXT = TEMPLATES.map((file) => ({ file: relative(CHART, file), text: read(file) }))
// Every file that is YAML and not a template: Helm reads these as they are.
const PLAIN_YAML = [...filesUnder(CHART), ...filesUnder(join(ROOT, 'helm/examples'))]
  .filter((f) => /\.ya?ml$/.test(f) && !f.includes('/templates/'))

type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
type JsonObject = { [key: string]: Json }
const isObject = (v: unknown): v is JsonObject => typeof v === 'object' && v !== null && !Array.isArray(v)

/** Parses as Helm does (go-yaml: YAML 1.1), failing on any error or warning (e.g. a duplicate key). */
function parseYaml (text: string, version: '1.1' | '1.2' = '1.1'): Json[] {
  const docs = parseAllDocuments(text, { version, merge: true, uniqueKeys: true, prettyErrors: true })
  if (!Array.isArray(docs)) return [] // an empty stream
  const problems = docs.flatMap((d) => [...d.errors, ...d.warnings]).map((e) => e.message)
  if (problems.length > 0) throw new Error(problems.join('\n'))
  return docs.map((d) => d.toJS() as Json)
}

const VALUES = parseYaml(read(join(CHART, 'values.yaml')))[0] as JsonObject

/** Every `.Values.a.b` path in a template's text (also `$.Values.a.b`). */
function valuesPaths (text: string): string[] {
  return [...text.matchAll(/\.Values((?:\.[A-Za-z_][A-Za-z0-9_]*)+)/g)].map((m) => (m[1] ?? '').slice(1))
}

function pathExists (values: Json, path: string): boolean {
  let node: Json | undefined = values
  for (const key of path.split('.')) {
    if (!isObject(node) || !(key in node)) return false
    node = node[key]
  }
  return true
}

/**
 * The documented values of values.yaml: a mapping key without a comment of its own is a
 * group and its keys are documented one by one; any other key is one documented value
 * (free-form maps such as `resources` are documented as a whole).
 */
function documentedValues (): Array<{ path: string, comment: string }> {
  const doc = parseDocument(read(join(CHART, 'values.yaml')))
  const out: Array<{ path: string, comment: string }> = []
  const walk = (map: YAMLMap, prefix: string, inherited: string | undefined): void => {
    map.items.forEach((pair: Pair, i) => {
      const key = isScalar(pair.key) ? String(pair.key.value) : ''
      // The comment above a mapping's first key is stored on the mapping itself.
      const before = (isScalar(pair.key) ? pair.key.commentBefore : undefined) ?? (i === 0 ? inherited : undefined)
      const comment = before ?? (isScalar(pair.value) ? pair.value.comment : undefined) ?? ''
      if (isMap(pair.value) && pair.value.items.length > 0 && !comment.includes('-- ')) {
        walk(pair.value, `${prefix}${key}.`, pair.value.commentBefore ?? undefined)
      } else {
        out.push({ path: prefix + key, comment })
      }
    })
  }
  if (isMap(doc.contents)) walk(doc.contents, '', doc.contents.commentBefore ?? undefined)
  return out
}

t.test('every YAML file that is not a template parses, and means the same in YAML 1.1 and 1.2', async (t) => {
  const files = [...PLAIN_YAML, join(ROOT, 'docker-compose.yml')]
  t.ok(files.length >= 5, `found ${files.length} files`)
  for (const file of files) {
    const text = read(file)
    const name = relative(ROOT, file)
    const docs = parseYaml(text, '1.1')
    t.ok(docs.length > 0 && docs.every(isObject), `${name} is a YAML mapping`)
    // Helm reads YAML 1.1 (go-yaml), docker compose 1.2: `yes`, `0444` and the like
    // would mean different things to them.
    t.same(parseYaml(text, '1.2'), docs, `${name}: no value reads differently in YAML 1.1 and 1.2`)
  }
})

t.test('the YAML check fails on what Helm would reject or misread', async (t) => {
  t.throws(() => parseYaml('a: 1\na: 2\n'), /unique/i, 'duplicate keys')
  t.throws(() => parseYaml('a: [1, 2\n'), 'unclosed flow sequence')
  t.not(JSON.stringify(parseYaml('mode: 0444\non: yes\n', '1.1')), JSON.stringify(parseYaml('mode: 0444\non: yes\n', '1.2')),
    'octal and yes/on differ between 1.1 and 1.2')
})

t.test('Chart.yaml: a v2 application chart whose appVersion is the image tag of this version', async (t) => {
  const chart = parseYaml(read(join(CHART, 'Chart.yaml')))[0] as JsonObject
  const pkg = JSON.parse(read(join(ROOT, 'package.json'))) as { version: string }
  t.match(chart, { apiVersion: 'v2', name: 'store-auth-proxy', type: 'application' })
  t.match(chart.version, /^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/, 'version is SemVer')
  t.equal(chart.appVersion, pkg.version, 'appVersion is package.json version (the default image tag)')
})

t.test('every .Values path a template uses exists in values.yaml', async (t) => {
  const used = TEMPLATE_TEXT.flatMap(({ file, text }) => valuesPaths(text).map((path) => ({ file, path })))
  t.ok(used.length > 50, `found ${used.length} uses`)
  for (const { file, path } of used) {
    t.ok(pathExists(VALUES, path), `${file}: .Values.${path}`)
  }
  // Values reached any other way would escape this check.
  for (const { file, text } of TEMPLATE_TEXT) {
    t.notMatch(text, /index\s+\$?\.Values|:=\s*\$?\.Values\s*\}\}|\bpluck\b/, `${file} reaches values only as .Values.a.b`)
  }
  // The check can fail.
  t.same(valuesPaths('{{ .Values.proxy.port | int64 }} {{- with $.Values.image.tag }}'), ['proxy.port', 'image.tag'])
  t.notOk(pathExists(VALUES, 'proxy.prot'))
})

t.test('every value in values.yaml is used by a template', async (t) => {
  const used = new Set(TEMPLATE_TEXT.flatMap(({ text }) => valuesPaths(text)))
  for (const { path } of documentedValues()) {
    const isUsed = [...used].some((u) => u === path || path.startsWith(`${u}.`) || u.startsWith(`${path}.`))
    t.ok(isUsed, `${path} is used`)
  }
})

t.test('every value is commented and listed in the values table of docs/kubernetes.md', async (t) => {
  const documented = documentedValues()
  t.ok(documented.length > 40, `found ${documented.length} values`)
  const doc = read(join(ROOT, 'docs/kubernetes.md'))
  const table = doc.slice(doc.indexOf('\n## Values\n'))
  t.ok(table.length > 1000, 'docs/kubernetes.md has a Values section')
  const tableKeys = [...table.matchAll(/^\| `([^`]+)` \|/gm)].map((m) => m[1])
  for (const { path, comment } of documented) {
    t.match(comment, /-- \S/, `${path} has a "# --" comment`)
    t.ok(tableKeys.includes(path), `${path} is in the values table`)
  }
  const paths = documented.map((d) => d.path)
  for (const key of tableKeys) t.ok(paths.includes(key ?? ''), `table row ${key} is a value`)
})
