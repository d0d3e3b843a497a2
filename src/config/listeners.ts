/**
 * Whether two listen addresses could collide on one port, as far as can be told without
 * resolving names: the same host; `::` (dual-stack on Linux, so every address); `0.0.0.0`
 * and anything but an IPv6 literal; `localhost` and a loopback address. `127.0.0.1` and
 * `::1` do not collide, nor do two different addresses.
 */
export function hostsOverlap (a: string, b: string): boolean {
  const [x, y] = [normalHost(a), normalHost(b)]
  if (x === y || x === '::' || y === '::') return true
  if (x === '0.0.0.0') return !y.includes(':')
  if (y === '0.0.0.0') return !x.includes(':')
  return (x === 'localhost' && LOOPBACK.has(y)) || (y === 'localhost' && LOOPBACK.has(x))
}
const LOOPBACK = new Set(['127.0.0.1', '::1'])

/**
 * The address to hand to listen(): HOST and ADMIN_HOST may write an IPv6 literal the way a URL
 * does (`[::1]`), which listen() would try to resolve as a name and fail (ENOTFOUND).
 */
export const listenHost = (host: string): string => host.startsWith('[') && host.endsWith(']') ? host.slice(1, -1) : host
function normalHost (host: string): string {
  const h = listenHost(host.toLowerCase())
  return h === '::0' || h === '0:0:0:0:0:0:0:0' ? '::' : h
}

// A host name (RFC 1123 labels) or an IP literal; anything else cannot be listened on.
const HOST_PATTERN = /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*\.?$/i
// An IPv6 literal may be written in brackets, as a URL writes it: both or neither.
const IP_PATTERN = /^(?:\d{1,3}(?:\.\d{1,3}){3}|[0-9a-f:.]*:[0-9a-f:.]*(?:%[\w.-]+)?|\[[0-9a-f:.]*:[0-9a-f:.]*(?:%[\w.-]+)?\])$/i
// RFC 1123 §2.1: a host name's top-level label is never all digits. `10.0.0.1000` is a mistyped
// address and `8080` a port in the wrong variable, not names to resolve (the resolver would take
// `8080` for the address 0.0.31.144, and `127.1` for 127.0.0.1, which hostsOverlap cannot see).
const NUMERIC_TOP_LABEL = /(?:^|\.)\d+\.?$/
const isHostName = (host: string): boolean => HOST_PATTERN.test(host) && !NUMERIC_TOP_LABEL.test(host)

/** What check-config can see about the two listeners without listening. */
export function listenerProblems (raw: { HOST: string, PORT: number, ADMIN_HOST: string, ADMIN_PORT: number }): string[] {
  const problems: string[] = []
  for (const name of ['HOST', 'ADMIN_HOST'] as const) {
    const host = raw[name]
    if (!isHostName(host) && !IP_PATTERN.test(host)) problems.push(`${name}: is neither a host name nor an IP address`)
  }
  if (raw.PORT !== 0 && raw.PORT === raw.ADMIN_PORT && hostsOverlap(raw.HOST, raw.ADMIN_HOST)) {
    problems.push(`PORT: equals ADMIN_PORT (${raw.PORT}) on overlapping addresses ` +
      `(HOST=${raw.HOST}, ADMIN_HOST=${raw.ADMIN_HOST}): the two listeners need different ports`)
  }
  return problems
}
