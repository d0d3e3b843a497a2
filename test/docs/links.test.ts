// The docs a user reads: every relative markdown link in README.md, docs/, helm/ and bench/
// leads to a file that exists and, with a #anchor, to a heading that exists (GitHub's
// slugs); and the docs stay within their size budgets.
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { dirname, join, relative } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const ROOT = fileURLToPath(new URL('../../', import.meta.url))

function markdownUnder (dir: string): string[] {
  return readdirSync(join(ROOT, dir), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.md'))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)))
}

const FILES = ['README.md', ...markdownUnder('docs'), ...markdownUnder('helm'), ...markdownUnder('bench')]

/** The text outside fenced code blocks and inline code: no heading or link is read from code. */
function prose (text: string): string {
  return text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '').replace(/`[^`\n]*`/g, (code) => code.replace(/[[\]()#]/g, '_'))
}

/** GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens. */
function slug (heading: string): string {
  return heading.trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-')
}

/** Every anchor a file's headings make, with GitHub's -1, -2 for repeats. */
function anchors (text: string): Set<string> {
  const seen = new Map<string, number>()
  const found = new Set<string>()
  const withoutFences = text.replace(/^(```|~~~)[^\n]*\n[\s\S]*?^\1[^\n]*$/gm, '')
  for (const m of withoutFences.matchAll(/^#{1,6}\s+(.+?)\s*#*\s*$/gm)) {
    const base = slug(m[1] ?? '')
    const n = seen.get(base) ?? 0
    seen.set(base, n + 1)
    found.add(n === 0 ? base : `${base}-${n}`)
  }
  return found
}

/** The relative link targets of a file: [text](target), images included, URLs and mail left out. */
function links (text: string): string[] {
  return [...prose(text).matchAll(/\]\(([^)\s]+)(?:\s+"[^"]*")?\)/g)]
    .map((m) => m[1] ?? '')
    .filter((target) => !/^[a-z][a-z0-9+.-]*:/i.test(target))
}

/** What is wrong with one link from `from`, or undefined when it resolves. */
function broken (from: string, target: string): string | undefined {
  const [path = '', anchor] = target.split('#', 2)
  const file = path === '' ? join(ROOT, from) : join(ROOT, dirname(from), decodeURIComponent(path))
  if (!existsSync(file)) return 'no such file'
  if (anchor === undefined || anchor === '' || statSync(file).isDirectory() || !file.endsWith('.md')) return undefined
  return anchors(readFileSync(file, 'utf8')).has(decodeURIComponent(anchor).toLowerCase()) ? undefined : `no heading #${anchor}`
}

t.test('the slug and anchor rules match GitHub\'s', async (t) => {
  t.equal(slug('Same-run benchmark, 2026-11-23 (`npm run bench`)'), 'same-run-benchmark-2026-11-23-npm-run-bench')
  t.equal(slug('Try it: the compose profile `egress`'), 'try-it-the-compose-profile-egress')
  t.equal(slug('An unexpected `100 Continue`'), 'an-unexpected-100-continue')
  t.same([...anchors('# A\n## A\n```\n# not a heading\n```\n')], ['a', 'a-1'])
  t.same(links('[x](a.md#b) [y](https://e.org) `[z](c.md)`\n```\n[w](d.md)\n```\n![i](img.png)'), ['a.md#b', 'img.png'])
})

t.test('the check can fail', async (t) => {
  t.equal(broken('docs/overload.md', 'no-such-file.md'), 'no such file')
  t.equal(broken('docs/overload.md', 'overload.md#no-such-heading'), 'no heading #no-such-heading')
  t.equal(broken('docs/overload.md', '#what-a-caller-sees'), undefined)
})

t.test('every relative link in the docs resolves, anchors included', async (t) => {
  t.ok(FILES.length > 10, `${FILES.length} markdown files`)
  let count = 0
  for (const file of FILES) {
    for (const target of links(readFileSync(join(ROOT, file), 'utf8'))) {
      count++
      const problem = broken(file, target)
      t.equal(problem, undefined, `${file}: (${target})${problem === undefined ? '' : ': ' + problem}`)
    }
  }
  t.ok(count > 50, `${count} links checked`)
})

const size = (path: string): number => statSync(join(ROOT, path)).size

t.test('the docs stay within their size budgets', async (t) => {
  t.ok(size('README.md') <= 20_000, `README.md is ${size('README.md')} bytes, at most 20 000`)
  const chart = 'helm/store-auth-proxy/README.md'
  t.ok(size(chart) <= 15_000, `the chart README is ${size(chart)} bytes, at most 15 000`)
  // Every file under docs/; bench/RESULTS.md holds the dated results and is not counted.
  const docsTree = readdirSync(join(ROOT, 'docs'), { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile()).map((e) => relative(ROOT, join(e.parentPath, e.name)))
  const total = [...docsTree, chart, 'bench/README.md'].reduce((sum, f) => sum + size(f), 0)
  t.ok(total <= 150_000, `docs/, the chart README and bench/README.md are ${total} bytes, at most 150 000`)
})
