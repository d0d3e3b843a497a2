// The one way the tests render the Helm chart: a real `helm template` when `helm` is on PATH,
// else the team's helm-template tool where HELM_TEMPLATE_DIR points at it (`helm template`
// re-implemented on Go's text/template, Sprig and Helm's own functions; it builds itself with
// Go on first use, about a minute: .ci/run does that before the tests). Without either, every
// file that imports this one is skipped with one line saying what to install
// (test/helpers/tools.ts); under CI that fails instead. The tool's validate.mjs then checks the
// objects against Kubernetes' schemas; with Helm alone there is no validate.mjs, and the
// rendered objects are only parsed.
import { spawn, spawnSync } from 'node:child_process'
import { cpSync, existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { homedir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import tap from 'tap'
import { parseAllDocuments } from 'yaml'
import { tempDir } from '../helpers/temp-dir.js'
import { chartRenderer, HELM, skipFileUnless } from '../helpers/tools.js'

skipFileUnless(tap, HELM)
const RENDERER = chartRenderer()

export const ROOT = fileURLToPath(new URL('../../', import.meta.url))
export const CHART = join(ROOT, 'helm/store-auth-proxy')
export const EXAMPLE = join(ROOT, 'helm/examples/my-app')
/** The helm-template tool's directory (its validate.mjs), when that is the renderer. */
const TOOL_DIR = RENDERER?.kind === 'helm-template' ? RENDERER.dir : undefined

/**
 * A test's `skip` for what only the helm-template tool does: `--show-notes` (NOTES.txt on
 * stderr), which `helm template` has no flag for.
 */
export const NEEDS_HELM_TEMPLATE = TOOL_DIR === undefined ? 'helm template prints no NOTES.txt: needs the helm-template renderer (HELM_TEMPLATE_DIR)' : false

export type Json = null | boolean | number | string | Json[] | { [key: string]: Json }
export type JsonObject = { [key: string]: Json }
/** A rendered Kubernetes object. */
export type K8s = JsonObject & { apiVersion: string, kind: string, metadata: JsonObject & { name: string } }

export interface Render {
  status: number | null
  stdout: string
  stderr: string
}

function run (command: string, args: string[], input?: string): Render {
  const out = spawnSync(command, args, { cwd: ROOT, input, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024, timeout: 120_000 })
  if (out.error !== undefined) throw out.error
  return { status: out.status, stdout: out.stdout, stderr: out.stderr }
}

async function runAsync (command: string, args: string[], input: string): Promise<Render> {
  return await new Promise((resolve, reject) => {
    const child = spawn(command, args, { cwd: ROOT, stdio: ['pipe', 'pipe', 'pipe'] })
    let stdout = ''
    let stderr = ''
    child.stdout.setEncoding('utf8').on('data', (c: string) => { stdout += c })
    child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
    child.on('error', reject)
    child.on('close', (status) => { resolve({ status, stdout, stderr }) })
    child.stdin.end(input)
  })
}

let binary: string | undefined
/**
 * The tool's built binary. The first call goes through helm-template.sh, which installs and
 * builds what is missing; later ones run the binary it built (the newest in its cache), which
 * saves a second per render.
 */
function tool (dir: string, args: string[]): Render {
  if (binary !== undefined) return run(binary, args)
  const out = run('bash', [join(dir, 'helm-template.sh'), ...args])
  const cache = join(process.env.XDG_CACHE_HOME ?? join(homedir(), '.cache'), 'helm-template')
  const built = readdirSync(cache).map((d) => join(cache, d, 'helm-template')).filter((f) => existsSync(f))
    .sort((a, b) => statSync(b).mtimeMs - statSync(a).mtimeMs)
  binary = built[0]
  return out
}

/** `helm template` with these arguments (release name, chart, flags). */
export function helmTemplate (args: string[]): Render {
  return TOOL_DIR === undefined ? run('helm', ['template', ...args]) : tool(TOOL_DIR, args)
}

/**
 * validate.mjs on a YAML stream: Kubernetes' schemas, unknown fields, names and labels.
 * With Helm alone (no helm-template tool) nothing checks them: it passes.
 */
export async function validate (yaml: string): Promise<Render> {
  if (TOOL_DIR === undefined) return { status: 0, stdout: '', stderr: '' }
  return await runAsync(process.execPath, [join(TOOL_DIR, 'validate.mjs'), '--quiet'], yaml)
}

/** The documents of a YAML stream, read as Kubernetes reads them (YAML 1.1). */
export function parseObjects (yaml: string): K8s[] {
  const docs = parseAllDocuments(yaml, { version: '1.1' })
  if (!Array.isArray(docs)) return []
  return docs.map((d) => d.toJS() as K8s | null).filter((d): d is K8s => d !== null)
}

export class RenderError extends Error {}

/** Renders and validates, throwing with the tool's messages on any failure. */
export async function render (args: string[]): Promise<K8s[]> {
  const out = helmTemplate(args)
  if (out.status !== 0) throw new RenderError(`helm template ${args.join(' ')} failed:\n${out.stderr}`)
  const checked = await validate(out.stdout)
  if (checked.status !== 0) throw new RenderError(`helm template ${args.join(' ')}: invalid objects:\n${checked.stdout}${checked.stderr}`)
  return parseObjects(out.stdout)
}

/** The error message of a render that must fail (throws if it renders). */
export function refusal (args: string[]): string {
  const out = helmTemplate(args)
  if (out.status === 0) throw new Error(`helm template ${args.join(' ')} rendered, but should have failed`)
  return out.stderr
}

/** The version in a Chart.yaml. */
export function chartVersion (dir: string = CHART): string {
  return /^version:\s*(\S+)/m.exec(readFileSync(join(dir, 'Chart.yaml'), 'utf8'))?.[1] ?? ''
}

/**
 * A copy of a parent chart (by default the example, helm/examples/my-app) with
 * store-auth-proxy packaged into its charts/, as `helm dependency update` does (a .tgz named
 * <name>-<version>.tgz holding the chart's directory).
 */
export function packagedParent (source: string = EXAMPLE): string {
  const dir = join(tempDir('store-auth-proxy-chart-'), 'parent')
  cpSync(source, dir, { recursive: true, filter: (src) => !src.endsWith('/charts') })
  mkdirSync(join(dir, 'charts'))
  const tgz = join(dir, 'charts', `store-auth-proxy-${chartVersion()}.tgz`)
  const out = run('tar', ['-C', join(ROOT, 'helm'), '-czf', tgz, 'store-auth-proxy'])
  if (out.status !== 0) throw new Error(`tar failed: ${out.stderr}`)
  return dir
}

/** Objects of one kind. */
export const ofKind = (objects: K8s[], kind: string): K8s[] => objects.filter((o) => o.kind === kind)

/** The single object of a kind (and name, when given). */
export function one (objects: K8s[], kind: string, name?: string): K8s {
  const found = ofKind(objects, kind).filter((o) => name === undefined || o.metadata.name === name)
  if (found.length !== 1) throw new Error(`expected one ${kind}${name === undefined ? '' : ` ${name}`}, found ${found.length}`)
  return found[0] as K8s
}

export interface Container extends JsonObject {
  name: string
}

/** A pod template's spec within a Deployment. */
export function podSpec (deployment: K8s): JsonObject {
  return ((deployment.spec as JsonObject).template as JsonObject).spec as JsonObject
}

/** The store-auth-proxy container of a Deployment, and whether it is an init container. */
export function sidecarOf (deployment: K8s): { container: Container, init: boolean } {
  const spec = podSpec(deployment)
  const find = (list: Json | undefined): Container | undefined =>
    (Array.isArray(list) ? list as Container[] : []).find((c) => c.name === 'store-auth-proxy')
  const init = find(spec.initContainers)
  const plain = find(spec.containers)
  if ((init === undefined) === (plain === undefined)) throw new Error('expected the sidecar once, in initContainers or containers')
  return init !== undefined ? { container: init, init: true } : { container: plain as Container, init: false }
}

/** A container's env as a name → value map (valueFrom entries as JSON). */
export function envOf (container: Container): Record<string, string> {
  const env = (container.env ?? []) as JsonObject[]
  return Object.fromEntries(env.map((e) => [String(e.name), e.value === undefined ? JSON.stringify(e.valueFrom) : String(e.value)]))
}
