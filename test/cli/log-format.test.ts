// Logs a person can read: coloured lines on a terminal (pino-pretty, loaded only then), JSON
// lines for everything else, LOG_FORMAT to choose; and a listener that fails says so last,
// after every line logged before it.
import { spawn } from 'node:child_process'
import { once } from 'node:events'
import { closeSync, openSync, readFileSync } from 'node:fs'
import { createServer, type AddressInfo } from 'node:net'
import { join } from 'node:path'
import { PassThrough } from 'node:stream'
import { fileURLToPath } from 'node:url'
import t, { type Test } from 'tap'
import { createLogger, jsonDestination, logFormatFor, prettyDestination } from '../../src/logger.js'
import { CLIENT_ID, CLIENT_SECRET, startStandIn } from '../helpers/build.js'
import { MAIN, reapOnExit, runMain, SKIP_UNDER_MUTATION } from '../helpers/process.js'
import { tempDir } from '../helpers/temp-dir.js'

const LOADED_PACKAGES = fileURLToPath(new URL('../fixtures/loaded-packages.cjs', import.meta.url))

t.test('LOG_FORMAT: auto is pretty on a terminal and JSON otherwise; json and pretty are as said', async (t) => {
  t.equal(logFormatFor('auto', true), 'pretty')
  t.equal(logFormatFor('auto', false), 'json')
  t.equal(logFormatFor('json', true), 'json')
  t.equal(logFormatFor('pretty', false), 'pretty')
})

t.test('json: a line held for stdout is written by flushSync, before the process writes anything else', async (t) => {
  const file = join(tempDir('json-lines-'), 'out')
  const fd = openSync(file, 'w')
  t.teardown(() => { closeSync(fd) })
  const destination = jsonDestination(fd)
  await once(destination as unknown as NodeJS.EventEmitter, 'ready')
  createLogger('info', destination).info({ listener: 'admin' }, 'Server listening at http://127.0.0.1:9090')
  destination.flushSync()
  t.match(readFileSync(file, 'utf8'), /^\{"level":30,"time":\d+,"service":"store-auth-proxy","listener":"admin","msg":"Server listening at http:\/\/127\.0\.0\.1:9090"\}\n$/)
})

async function prettyLines (colorize: boolean, log: (logger: ReturnType<typeof createLogger>) => void): Promise<string> {
  const sink = new PassThrough()
  let text = ''
  sink.setEncoding('utf8').on('data', (chunk: string) => { text += chunk })
  log(createLogger('info', await prettyDestination(sink, colorize)))
  return text
}

t.test('pretty: the time, the level by name and the message, then the fields; still redacted', async (t) => {
  const text = await prettyLines(false, (log) => { log.info({ port: 8080, access_token: 'tok-123' }, 'hello there') })
  t.match(text, /^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: hello there\n {4}port: 8080\n {4}access_token: "\[redacted\]"\n$/)
  t.notMatch(text, 'tok-123')
  t.notMatch(text, '"level"', 'not JSON')
  t.notMatch(text, 'service', 'the service name is on every line: left out')
  const coloured = await prettyLines(true, (log) => { log.warn('careful') })
  const ESC = '\u001b'
  t.ok(coloured.includes(`${ESC}[33mWARN${ESC}[39m`), 'the level in colour')
})

t.test('the sidecar: JSON lines when stdout is not a terminal, pretty with LOG_FORMAT=pretty', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const standIn = await startStandIn(t)
  const env = { PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', CLIENT_ID, CLIENT_SECRET, AUTH_URL: standIn.url, UPSTREAM_URL: standIn.url }
  const json = runMain(t, [], env)
  await json.waitFor(/^\{"level":30,"time":\d+,"service":"store-auth-proxy".*"msg":"store-auth-proxy started"\}$/m)
  const pretty = runMain(t, [], { ...env, LOG_FORMAT: 'pretty' })
  await pretty.waitFor(/^\[\d\d:\d\d:\d\d\.\d{3}\] INFO: store-auth-proxy started\n {4}version: "/m)
  t.notMatch(pretty.stdout(), /^\{/m, 'no JSON line')
  json.child.kill('SIGTERM')
  pretty.child.kill('SIGTERM')
  t.same(await Promise.all([json.exited, pretty.exited]), [0, 0])
})

/** A port held until the test ends, so the sidecar finds it taken. */
async function heldPort (t: Test): Promise<number> {
  const server = createServer().listen(0, '127.0.0.1')
  await once(server, 'listening')
  t.teardown(() => { server.close() })
  return (server.address() as AddressInfo).port
}

t.test('PORT taken: the fatal line comes after the admin listener\'s lines, as it happened; pino-pretty not loaded for JSON', { skip: SKIP_UNDER_MUTATION }, async (t) => {
  const port = await heldPort(t)
  // stdout and stderr into one file, as a terminal or a container log shows them: the order
  // of the lines is the order they were written in.
  const file = join(tempDir('listen-order-'), 'output')
  const fd = openSync(file, 'w')
  const child = spawn(process.execPath, ['--require', LOADED_PACKAGES, MAIN], {
    env: { PATH: process.env.PATH ?? '', PORT: String(port), ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', CLIENT_ID, CLIENT_SECRET, AUTH_URL: 'http://127.0.0.1:1', UPSTREAM_URL: 'http://127.0.0.1:1' },
    stdio: ['ignore', fd, fd]
  })
  reapOnExit(child)
  closeSync(fd)
  t.same(await once(child, 'exit'), [1, null])
  const lines = readFileSync(file, 'utf8').split('\n').filter((line) => line !== '')
  const fatal = lines.findIndex((line) => line.startsWith('store-auth-proxy: PORT='))
  t.ok(fatal > 0, lines.join('\n'))
  t.ok(lines.slice(0, fatal).some((line) => line.includes('"listener":"admin","msg":"Server listening at')), 'the admin listener\'s line, before')
  t.same(lines.slice(fatal + 1).filter((line) => !line.startsWith('loaded packages: ')), [], 'nothing after the fatal line')
  const loaded = /^loaded packages: (.*)$/m.exec(lines.join('\n'))?.[1]?.split(',') ?? []
  t.ok(loaded.includes('pino'), 'the report sees pino')
  t.notOk(loaded.includes('pino-pretty'), 'pino-pretty is loaded only for pretty lines')
})
