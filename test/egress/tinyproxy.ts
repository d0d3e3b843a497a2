import { spawn } from 'node:child_process'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { connect } from 'node:net'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import type { Test } from 'tap'
import { downPort } from '../helpers/recording-proxy.js'
import { skipUnless, TINYPROXY } from '../helpers/tools.js'

/** A test's `skip` without tinyproxy (Debian's or Homebrew's): test/helpers/tools.ts. */
export const noTinyproxy = skipUnless(TINYPROXY)

/**
 * A real tinyproxy of our own on a free loopback port, with Basic authentication, sending
 * the requests for `upstreamFor` (a domain) to the proxy at `upstreamPort`: the recording
 * proxy, the only one that resolves TI's test names. Stopped by its PID at teardown.
 */
export async function startTinyproxy (t: Test, { credentials, upstreamPort, upstreamFor }: {
  credentials: { user: string, password: string }, upstreamPort: number, upstreamFor: string
}): Promise<{ url: (userinfo?: string) => string }> {
  const dir = mkdtempSync(join(tmpdir(), 'egress-tinyproxy-'))
  const port = await downPort()
  const config = join(dir, 'tinyproxy.conf')
  writeFileSync(config, [
    `Port ${port}`,
    'Listen 127.0.0.1',
    'Timeout 30',
    'MaxClients 100',
    'Allow 127.0.0.1',
    'DisableViaHeader Yes',
    'LogLevel Warning',
    `BasicAuth ${credentials.user} ${credentials.password}`,
    `Upstream http 127.0.0.1:${upstreamPort} "${upstreamFor}"`
  ].join('\n') + '\n')
  const child = spawn('tinyproxy', ['-d', '-c', config], { stdio: ['ignore', 'ignore', 'pipe'] })
  let stderr = ''
  child.stderr.setEncoding('utf8').on('data', (c: string) => { stderr += c })
  const exited = new Promise<void>((resolve) => child.once('exit', () => { resolve() }))
  t.teardown(async () => {
    if (child.exitCode === null && child.pid !== undefined) process.kill(child.pid, 'SIGTERM')
    await exited
    rmSync(dir, { recursive: true, force: true })
  })
  // Ready once it accepts a connection.
  for (;;) {
    if (child.exitCode !== null) throw new Error(`tinyproxy exited: ${stderr}`)
    const accepted = await new Promise<boolean>((resolve) => {
      const socket = connect(port, '127.0.0.1', () => { socket.destroy(); resolve(true) })
      socket.on('error', () => { resolve(false) })
    })
    if (accepted) break
    await new Promise((resolve) => setTimeout(resolve, 20))
  }
  return { url: (userinfo) => `http://${userinfo === undefined ? '' : `${userinfo}@`}127.0.0.1:${port}` }
}
