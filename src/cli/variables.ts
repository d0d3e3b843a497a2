// `help config`: every variable the sidecar reads, its default and what it does in one line,
// for wherever README.md is not at hand (the image holds only dist/). README.md's table says
// more; test/cli/variables.test.ts holds both to the schema's list.
import { schema } from '../config/schema.js'
import { EGRESS_VARIABLES } from '../egress/route.js'

export const MEANINGS: Readonly<Record<string, string>> = {
  AUTH_URL: 'base URL of TI\'s OAuth API; the token comes from AUTH_URL/v1/oauth/accesstoken',
  CLIENT_ID: 'the client application\'s id (or CLIENT_ID_FILE)',
  CLIENT_ID_FILE: 'a file holding the client id, re-read before every token request',
  CLIENT_SECRET: 'the client application\'s secret (or CLIENT_SECRET_FILE)',
  CLIENT_SECRET_FILE: 'a file holding the secret, re-read before every token request (rotation needs no restart)',
  UPSTREAM_URL: 'base URL of the store API; callers send /v2/store/... themselves',
  HOST: 'proxy listener address; loopback by default: whatever reaches it is authenticated as you',
  PORT: 'proxy listener port',
  ADMIN_HOST: 'admin listener address (/livez, /readyz, /status, /metrics)',
  ADMIN_PORT: 'admin listener port',
  TOKEN_TIMEOUT_MS: 'timeout of one token request',
  UPSTREAM_TIMEOUT_MS: 'how long the store API may take to answer, and the longest pause in its body',
  TOKEN_REFRESH_MARGIN_MS: 'refresh the token this long before it expires (at most 10 % of its lifetime)',
  TOKEN_WAIT_MS: 'how long a request waits for a token being fetched before 503',
  SHUTDOWN_GRACE_MS: 'after SIGTERM, how long in-flight requests may take to finish',
  SHUTDOWN_DELAY_MS: 'after SIGTERM, keep serving this long first (non-native Kubernetes sidecars)',
  MAX_HEADER_BYTES: 'largest request head a caller may send; larger gets 431',
  MAX_HEADER_COUNT: 'most header fields a request may carry; more gets 431',
  MAX_BODY_BYTES: 'largest request body forwarded; larger gets 413; 0: no limit',
  HEADERS_TIMEOUT_MS: 'a caller must send its request head within this, else 408 (slowloris)',
  REQUEST_TIMEOUT_MS: 'a caller must send its whole request within this',
  KEEP_ALIVE_TIMEOUT_MS: 'an idle keep-alive connection from a caller is closed after this',
  IDLE_TIMEOUT_MS: 'a connection silent both ways this long is closed',
  UPSTREAM_QUEUE_TIMEOUT_MS: 'with every upstream connection busy, how long a request may wait for one (then 503)',
  UPSTREAM_QUEUE_LIMIT: 'with every upstream connection busy, how many requests may wait (more get 503 at once)',
  RATE_LIMITS: 'budgets, e.g. "GET /v2/store/products/catalog 1/4h cache=4h stale=1d; * /v2/store/** 5/1s"',
  RATE_LIMITS_FILE: 'the rules from a file instead (one per line, # comments)',
  RATE_LIMIT_MAX_WAIT_MS: 'a request over budget waits this long at most for room, else gets 429 with Retry-After',
  RATE_LIMIT_COOLDOWN_MS: 'after the gateway\'s own 429 without Retry-After, hold the rule back this long (doubled on repeats)',
  RATE_LIMIT_COOLDOWN_MAX_MS: 'cap on a gateway\'s Retry-After and on the cool-down',
  RATE_LIMIT_REDIS_URL: 'redis:// or rediss:// URL: budgets, cool-downs and the cache shared by the fleet',
  RATE_LIMIT_REDIS_URL_FILE: 'the Redis URL from a file instead, re-read before each reconnection',
  RATE_LIMIT_REDIS_TIMEOUT_MS: 'a Redis command slower than this counts as failed',
  RATE_LIMIT_FLEET_SIZE: 'the most sidecars on this credential at once; cut off from Redis, each spends its share',
  RATE_LIMIT_ALONE_MAX_MS: 'cut off from Redis this long, a sidecar spends nothing until it answers; unset: the longest window + 1 h; 0: no bound',
  RATE_LIMIT_HEADERS: 'RateLimit-Policy and RateLimit fields on the answers of budgeted rules',
  CACHE_MAX_BYTES: 'the read cache\'s copies in this sidecar\'s memory, at most (20 % of the memory limit if less)',
  CACHE_ENTRY_MAX_BYTES: 'a larger answer is passed on, not stored',
  CACHE_REDIS_MAX_BYTES: 'the fleet\'s copies in Redis, at most (oldest evicted); 0: none kept in Redis',
  MEMORY_LIMIT_BYTES: 'shed new requests (503) before this; unset: the cgroup\'s limit; 0: none',
  MAX_IN_FLIGHT_REQUESTS: 'requests handled at once; more get 503; 0: no cap',
  MAX_CONNECTIONS: 'connections open on the proxy port; more get 503 and are closed; 0: no bound',
  ADMIN_MAX_CONNECTIONS: 'connections open on the admin port; more get 503 and are closed unless a whole head comes at once',
  ACCESS_LOG: 'one log line per proxied request',
  STATUS_ENDPOINT: 'serve the admin /status; false: 404',
  STATUS_FROM: 'who may read /status: loopback (others get 403) or any',
  STATE_DIR: 'a directory for durable state that outlives a restart (an emptyDir): idempotency keys, the quota ledger; empty: none',
  ALLOWED_ROUTES: 'route policy: only these "METHOD PATH" entries go upstream, others get 403',
  TEST_ORDERS: 'send POST /v2/store/orders to TI\'s /v2/store/orders/test (staging)',
  LOG_FORMAT: 'json for collectors, pretty for a person; auto: pretty when stdout is a terminal',
  LOG_LEVEL: 'fatal, error, warn, info, debug, trace or silent',
  HTTPS_PROXY: 'egress proxy for https:// targets (CONNECT tunnel); also https_proxy',
  HTTP_PROXY: 'egress proxy for http:// targets; also http_proxy',
  NO_PROXY: 'targets sent direct: hosts, domains, IPs, CIDR ranges, *; also no_proxy'
}

const REQUIRED = new Set(['AUTH_URL', 'UPSTREAM_URL', 'CLIENT_ID', 'CLIENT_SECRET'])

/** The variables, one a line: name, default (or `required`, `-`), meaning. */
export function variablesHelp (): string {
  const properties = schema.properties as Record<string, { default?: unknown }>
  const rows = [...Object.keys(properties), ...EGRESS_VARIABLES].map((name) => {
    const value = properties[name]?.default
    const fallback = REQUIRED.has(name) ? 'required' : '-'
    return [name, value === undefined ? fallback : String(value), MEANINGS[name] ?? ''] as const
  })
  const nameWidth = Math.max(...rows.map(([name]) => name.length))
  const defaultWidth = Math.max(...rows.map(([, value]) => value.length))
  return `Configuration: environment variables only, read once at start. CLIENT_ID and CLIENT_SECRET
are required, each as itself or as its _FILE. "check-config" checks them all without starting.

  ${'variable'.padEnd(nameWidth)}  ${'default'.padEnd(defaultWidth)}  meaning
${rows.map(([name, value, meaning]) => `  ${name.padEnd(nameWidth)}  ${value.padEnd(defaultWidth)}  ${meaning}`).join('\n')}
`
}
