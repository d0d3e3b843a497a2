// Which way each target goes: through which egress proxy, or direct and why. Pure and light
// (check-config loads it): the settings are parsed in config/egress-proxy.ts, the connections
// through the egress proxy are in egress/connection.ts.
import { BlockList, isIP } from 'node:net'
import { defaultPort, type EgressProxy, type EgressProxyUrl } from '../config/egress-proxy.js'

export {
  defaultPort, EGRESS_VARIABLES, loadEgressProxy, NO_EGRESS_PROXY, parseProxyUrl, proxyDisplayUrl,
  type EgressProxy, type EgressProxyUrl
} from '../config/egress-proxy.js'

// --- NO_PROXY -------------------------------------------------------------------------

interface NoProxyEntry {
  /** A domain (matches itself and its subdomains), or undefined for an address entry. */
  domain?: string
  addresses?: BlockList
  port?: string
}

/**
 * NO_PROXY's entries, comma or space separated: `*`; a domain, `example.com`, `.example.com`
 * or `*.example.com`, each matching the domain and its subdomains; an IP address or a CIDR
 * range (IPv6 with or without brackets); any of them with `:port`. Pure.
 */
export function parseNoProxy (value: string): NoProxyEntry[] | '*' {
  const entries: NoProxyEntry[] = []
  for (const raw of value.toLowerCase().split(/[\s,]+/)) {
    if (raw === '') continue
    if (raw === '*') return '*'
    const { host, port } = splitPort(raw)
    const address = addressEntry(host)
    if (address !== undefined) entries.push({ addresses: address, ...(port === undefined ? {} : { port }) })
    else entries.push({ domain: host.replace(/^\*?\./, '').replace(/\.$/, ''), ...(port === undefined ? {} : { port }) })
  }
  return entries
}

function splitPort (entry: string): { host: string, port?: string } {
  const bracketed = /^\[([^\]]+)\](?::(\d+))?$/.exec(entry)
  if (bracketed !== null) return { host: bracketed[1] ?? '', ...(bracketed[2] === undefined ? {} : { port: bracketed[2] }) }
  // A bare IPv6 address (or range) has colons of its own: it carries no port.
  if (isIP(entry.split('/')[0] ?? '') === 6) return { host: entry }
  const withPort = /^(.+):(\d+)$/.exec(entry)
  return withPort === null ? { host: entry } : { host: withPort[1] ?? '', port: withPort[2] ?? '' }
}

function addressEntry (host: string): BlockList | undefined {
  const [address = '', bits] = host.split('/')
  const family = isIP(address)
  if (family === 0) return undefined
  const type = family === 4 ? 'ipv4' : 'ipv6'
  const list = new BlockList()
  const prefix = bits === undefined ? undefined : Number(bits)
  if (prefix === undefined || !Number.isInteger(prefix) || prefix < 0 || prefix > (family === 4 ? 32 : 128)) list.addAddress(address, type)
  else list.addSubnet(address, prefix, type)
  return list
}

const LOOPBACK = new BlockList()
LOOPBACK.addSubnet('127.0.0.0', 8, 'ipv4')
LOOPBACK.addAddress('::1', 'ipv6')

/**
 * Loopback is never sent through a proxy, whatever NO_PROXY says (as Go's
 * ProxyFromEnvironment does): the stand-in, the demo and a node-local TI double are on
 * this machine, and an egress proxy elsewhere cannot reach them.
 */
export function isLoopback (hostname: string): boolean {
  const host = hostname.toLowerCase().replace(/^\[|\]$/g, '')
  if (host === 'localhost' || host.endsWith('.localhost')) return true
  const family = isIP(host)
  return family !== 0 && LOOPBACK.check(host, family === 4 ? 'ipv4' : 'ipv6')
}

/** Whether NO_PROXY sends `target` direct. Pure. */
export function bypassesEgressProxy (target: URL, noProxy: string): boolean {
  const entries = parseNoProxy(noProxy)
  if (entries === '*') return true
  const host = target.hostname.toLowerCase().replace(/^\[|\]$/g, '').replace(/\.$/, '')
  const port = target.port === '' ? defaultPort(target.protocol) : target.port
  const family = isIP(host)
  return entries.some((entry) => {
    if (entry.port !== undefined && entry.port !== port) return false
    if (entry.addresses !== undefined) return family !== 0 && entry.addresses.check(host, family === 4 ? 'ipv4' : 'ipv6')
    const domain = entry.domain ?? ''
    return domain !== '' && (host === domain || host.endsWith(`.${domain}`))
  })
}

export type Route =
  | { readonly via: 'direct', readonly why: 'no proxy set' | 'loopback' | 'NO_PROXY' }
  | { readonly via: 'proxy', readonly proxy: EgressProxyUrl }

/** How a request to `target` leaves: through which egress proxy, or direct and why. Pure. */
export function routeFor (target: string, egress: EgressProxy): Route {
  const url = new URL(target)
  const proxy = url.protocol === 'https:' ? egress.httpsProxy : egress.httpProxy
  if (proxy === undefined) return { via: 'direct', why: 'no proxy set' }
  if (isLoopback(url.hostname)) return { via: 'direct', why: 'loopback' }
  if (bypassesEgressProxy(url, egress.noProxy)) return { via: 'direct', why: 'NO_PROXY' }
  return { via: 'proxy', proxy }
}

/** The route as /status and the start log show it: never a credential. */
export function routeDisplay (route: Route): string {
  return route.via === 'proxy' ? `via ${route.proxy.display}` : `direct (${route.why})`
}

/** The settings, and the way the token endpoint and the upstream go, as /status, check-config and the start log show them: proxies as scheme://host:port only. */
export function egressSummary (egress: EgressProxy, targets: { token: { authUrl: string }, upstream: { url: string } }) {
  return {
    HTTPS_PROXY: egress.httpsProxy?.display ?? '',
    HTTP_PROXY: egress.httpProxy?.display ?? '',
    NO_PROXY: egress.noProxy,
    tokenRoute: routeDisplay(routeFor(targets.token.authUrl, egress)),
    upstreamRoute: routeDisplay(routeFor(targets.upstream.url, egress))
  }
}
