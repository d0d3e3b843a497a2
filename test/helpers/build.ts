import type { AddressInfo } from 'node:net'
import type { Test } from 'tap'
import { buildApp, type App, type AppDependencies } from '../../src/app.js'
import { loadConfig } from '../../src/config/load.js'
import { DEMO_CLIENT_ID, DEMO_CLIENT_SECRET } from '../../src/demo/config.js'
import { createStandIn, type StandIn, type StandInOptions } from '../../src/demo/stand-in.js'
import { captureLogs } from './logs.js'

export const CLIENT_ID = DEMO_CLIENT_ID
/** `+`, `/` and `=`: what percent-encoding would change. */
export const CLIENT_SECRET = DEMO_CLIENT_SECRET

export function urlOf (server: { server: { address: () => unknown } }): string {
  const { port } = server.server.address() as AddressInfo
  return `http://127.0.0.1:${port}`
}

/** The stand-in TI APIs on port 0, closed at teardown. */
export async function startStandIn (t: Test, options: Partial<StandInOptions> = {}): Promise<StandIn & { url: string }> {
  const standIn = createStandIn({ clientId: CLIENT_ID, clientSecret: CLIENT_SECRET, ...options })
  await standIn.app.listen({ host: '127.0.0.1', port: 0 })
  t.teardown(() => standIn.app.close())
  const url = urlOf(standIn.app)
  return { ...standIn, url: options.tls === undefined ? url : url.replace('http:', 'https:') }
}

export interface Built {
  app: App
  proxyUrl: string
  adminUrl: string
  logs: ReturnType<typeof captureLogs>
}

/**
 * The sidecar, built from environment-style settings exactly as main.ts does,
 * listening on port 0 on both listeners, with its logs captured. Its overload manager reads no
 * private memory unless a test gives a reader or system files of its own: the test process's
 * (tap's, the peers') is not the sidecar's, and would make a small MEMORY_LIMIT_BYTES shed by
 * chance.
 */
export async function build (
  t: Test, env: Record<string, string>, deps: Partial<AppDependencies> = {}, { start = true } = {}
): Promise<Built> {
  const logs = captureLogs()
  const config = loadConfig({
    CLIENT_ID, CLIENT_SECRET, PORT: '0', ADMIN_PORT: '0', ADMIN_HOST: '127.0.0.1', ...env
  })
  // The test process's own private memory is not the sidecar's: unknown, unless files are given.
  const memory = deps.memory?.readSystemFile === undefined ? { readPrivateBytes: () => undefined, ...deps.memory } : deps.memory
  const app = await buildApp(config, { log: logs.log, defaultMetrics: false, ...deps, memory })
  t.teardown(() => app.close())
  await app.proxy.listen({ host: '127.0.0.1', port: 0 })
  await app.admin.listen({ host: '127.0.0.1', port: 0 })
  if (start) await app.start()
  return { app, proxyUrl: urlOf(app.proxy), adminUrl: urlOf(app.admin), logs }
}

/**
 * The sidecar in front of `upstreamUrl`, with a stand-in token endpoint of its own
 * (returned too, to revoke tokens or change the secret it accepts).
 */
export async function startSidecar (t: Test, upstreamUrl: string, env: Record<string, string> = {}, deps: Partial<AppDependencies> = {}) {
  const standIn = await startStandIn(t)
  const built = await build(t, { AUTH_URL: standIn.url, UPSTREAM_URL: upstreamUrl, ...env }, deps)
  return { ...built, standIn }
}
