// Every variable the sidecar reads, its type, its default and its limits, in one place.
// The TypeScript type of a parsed environment is derived from this schema (EnvOf), so
// the two cannot drift; README.md's configuration table is checked against it
// (test/config/readme-table.test.ts).

export const DEFAULT_PORT = 8080
export const DEFAULT_ADMIN_PORT = 9090
export const DEFAULT_TOKEN_TIMEOUT_MS = 10_000
export const DEFAULT_UPSTREAM_TIMEOUT_MS = 30_000
export const DEFAULT_TOKEN_REFRESH_MARGIN_MS = 5 * 60_000
export const DEFAULT_TOKEN_WAIT_MS = 3_000
export const DEFAULT_SHUTDOWN_GRACE_MS = 10_000
export const DEFAULT_MAX_HEADER_BYTES = 16 * 1024
export const DEFAULT_HEADERS_TIMEOUT_MS = 10_000
export const DEFAULT_REQUEST_TIMEOUT_MS = 300_000
export const DEFAULT_KEEP_ALIVE_TIMEOUT_MS = 72_000
export const DEFAULT_IDLE_TIMEOUT_MS = 120_000
export const DEFAULT_UPSTREAM_QUEUE_TIMEOUT_MS = 5_000
export const DEFAULT_UPSTREAM_QUEUE_LIMIT = 1_000
export const DEFAULT_RATE_LIMIT_MAX_WAIT_MS = 1_000
export const DEFAULT_RATE_LIMIT_COOLDOWN_MS = 1_000
export const DEFAULT_RATE_LIMIT_COOLDOWN_MAX_MS = 60 * 60_000
export const DEFAULT_RATE_LIMIT_REDIS_TIMEOUT_MS = 200
/**
 * Unset RATE_LIMIT_ALONE_MAX_MS: the longest window of the rules + this, so every limit may be
 * spent alone for an hour (a sidecar spends alone only from one window after it was cut off).
 */
export const DEFAULT_RATE_LIMIT_ALONE_EXTRA_MS = 60 * 60_000
/**
 * RATE_LIMIT_ALONE_MAX_MS at most: 30 days. It is compared with the monotonic clock, never a
 * timer, so Node's timer limit (MAX_DURATION_MS) does not bind it, and the default for the
 * catalog's rules is 25 h. Longer would hold a dead sidecar's share as good as for ever, as
 * 0 (no bound) does plainly.
 */
export const MAX_ALONE_MS = 30 * 24 * 60 * 60_000
export const DEFAULT_CACHE_MAX_BYTES = 32 * 1024 * 1024
export const DEFAULT_CACHE_ENTRY_MAX_BYTES = 8 * 1024 * 1024
export const DEFAULT_CACHE_REDIS_MAX_BYTES = 64 * 1024 * 1024
/**
 * Requests in flight beyond which new ones get 503 OVERLOADED (docs/overload.md). Measured in a
 * 128 MiB cgroup under 1000 concurrent 60 KB POSTs: caps of 1000 and 2000 were OOM-killed (the
 * bodies of admitted requests, some 70 KiB of live memory each, arrive faster than the memory
 * watch can see), 500 held in 5 runs of 5. Without its body a request held costs about 8.5 KiB.
 */
export const DEFAULT_MAX_IN_FLIGHT_REQUESTS = 500
/**
 * Connections open on the proxy listener beyond which a new one is answered 503 OVERLOADED and
 * closed (docs/overload.md). A connection that never sends its whole head costs some 12 KiB:
 * in a 128 MiB cgroup, 10,000 of them OOM-killed the sidecar without a bound, and left its
 * peak at 93.5 MiB with this one. Four times the in-flight cap: room for idle keep-alive callers.
 */
export const DEFAULT_MAX_CONNECTIONS = 2000
/**
 * Below this a MEMORY_LIMIT_BYTES would shed at idle on live memory: the sidecar's own is some 20
 * MiB. Up to about 64 MiB its private memory at idle (some 37 MiB) is near the private-memory
 * water, and it serves about PRIVATE_FLOOR_IN_FLIGHT (8) requests at a time (docs/overload.md).
 */
export const MIN_MEMORY_LIMIT_BYTES = 32 * 1024 * 1024
/**
 * Connections open on the admin listener beyond which a new one is answered 503 and closed,
 * unless its first read is a whole head (src/admin/server.ts): the kubelet and Prometheus hold
 * a few; without a bound, 12,000 idle heads from the pod network OOM-killed the sidecar in a
 * 128 MiB group. At most 1000: their unfinished heads (24 KiB each, overload/limit-warnings.ts)
 * then hold 24 MiB; more than 10 % of the limit is warned of at start and by check-config.
 */
export const DEFAULT_ADMIN_MAX_CONNECTIONS = 64
/**
 * Header fields a request may carry; more gets 431 (docs/overload.md). Node hands an unfinished
 * head's fields to JavaScript 32 at a time and keeps them all: ~930 tiny fields held ~70 KiB a
 * connection. Bounded at 100, MAX_CONNECTIONS unfinished heads fit the memory model.
 */
export const DEFAULT_MAX_HEADER_COUNT = 100
/** Who may read the admin /status: loopback peers only (kubectl exec, port-forward), or any. */
export const STATUS_FROM = ['loopback', 'any'] as const
export type StatusFrom = typeof STATUS_FROM[number]

export const LOG_LEVELS = ['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'] as const
export type LogLevel = typeof LOG_LEVELS[number]
/** `auto`: coloured lines for a person when stdout is a terminal, JSON lines otherwise. */
export const LOG_FORMATS = ['auto', 'json', 'pretty'] as const
export type LogFormat = typeof LOG_FORMATS[number]

/**
 * The longest duration any variable accepts: one day. Node's timers hold at most
 * 2^31−1 ms (24.8 days); a longer delay fires after 1 ms instead (a huge
 * TOKEN_TIMEOUT_MS would time every token request out at once). One day is far longer
 * than any timeout here needs, and the sum of two (SHUTDOWN_DELAY_MS + SHUTDOWN_GRACE_MS)
 * still fits a timer.
 */
export const MAX_DURATION_MS = 24 * 60 * 60_000
/** Node's own limit for setTimeout, which MAX_DURATION_MS keeps every timer under. */
export const NODE_TIMER_MAX_MS = 2 ** 31 - 1

export const durationMs = <D extends number>(def: D, minimum = 1) =>
  ({ type: 'integer', minimum, maximum: MAX_DURATION_MS, default: def }) as const
export const port = <D extends number>(def: D) => ({ type: 'integer', minimum: 0, maximum: 65535, default: def }) as const
export const logLevel = { type: 'string', enum: LOG_LEVELS, default: 'info' } as const
export const logFormat = { type: 'string', enum: LOG_FORMATS, default: 'auto' } as const

export const schema = {
  type: 'object',
  properties: {
    AUTH_URL: { type: 'string' },
    CLIENT_ID: { type: 'string' },
    CLIENT_ID_FILE: { type: 'string' },
    CLIENT_SECRET: { type: 'string' },
    CLIENT_SECRET_FILE: { type: 'string' },
    UPSTREAM_URL: { type: 'string' },
    HOST: { type: 'string', minLength: 1, default: '127.0.0.1' },
    PORT: port(DEFAULT_PORT),
    ADMIN_HOST: { type: 'string', minLength: 1, default: '0.0.0.0' },
    ADMIN_PORT: port(DEFAULT_ADMIN_PORT),
    TOKEN_TIMEOUT_MS: durationMs(DEFAULT_TOKEN_TIMEOUT_MS),
    UPSTREAM_TIMEOUT_MS: durationMs(DEFAULT_UPSTREAM_TIMEOUT_MS),
    TOKEN_REFRESH_MARGIN_MS: durationMs(DEFAULT_TOKEN_REFRESH_MARGIN_MS, 0),
    TOKEN_WAIT_MS: durationMs(DEFAULT_TOKEN_WAIT_MS, 0),
    SHUTDOWN_GRACE_MS: durationMs(DEFAULT_SHUTDOWN_GRACE_MS),
    SHUTDOWN_DELAY_MS: durationMs(0, 0),
    MAX_HEADER_BYTES: { type: 'integer', minimum: 1024, maximum: 1024 * 1024, default: DEFAULT_MAX_HEADER_BYTES },
    MAX_HEADER_COUNT: { type: 'integer', minimum: 16, maximum: 2000, default: DEFAULT_MAX_HEADER_COUNT },
    MAX_BODY_BYTES: { type: 'integer', minimum: 0, default: 0 },
    HEADERS_TIMEOUT_MS: durationMs(DEFAULT_HEADERS_TIMEOUT_MS),
    REQUEST_TIMEOUT_MS: durationMs(DEFAULT_REQUEST_TIMEOUT_MS),
    KEEP_ALIVE_TIMEOUT_MS: durationMs(DEFAULT_KEEP_ALIVE_TIMEOUT_MS),
    IDLE_TIMEOUT_MS: durationMs(DEFAULT_IDLE_TIMEOUT_MS),
    UPSTREAM_QUEUE_TIMEOUT_MS: durationMs(DEFAULT_UPSTREAM_QUEUE_TIMEOUT_MS),
    UPSTREAM_QUEUE_LIMIT: { type: 'integer', minimum: 0, maximum: 100_000, default: DEFAULT_UPSTREAM_QUEUE_LIMIT },
    RATE_LIMITS: { type: 'string' },
    RATE_LIMITS_FILE: { type: 'string' },
    RATE_LIMIT_MAX_WAIT_MS: durationMs(DEFAULT_RATE_LIMIT_MAX_WAIT_MS, 0),
    RATE_LIMIT_COOLDOWN_MS: durationMs(DEFAULT_RATE_LIMIT_COOLDOWN_MS, 0),
    RATE_LIMIT_COOLDOWN_MAX_MS: durationMs(DEFAULT_RATE_LIMIT_COOLDOWN_MAX_MS),
    RATE_LIMIT_REDIS_URL: { type: 'string' },
    RATE_LIMIT_REDIS_URL_FILE: { type: 'string' },
    RATE_LIMIT_REDIS_TIMEOUT_MS: durationMs(DEFAULT_RATE_LIMIT_REDIS_TIMEOUT_MS),
    RATE_LIMIT_FLEET_SIZE: { type: 'integer', minimum: 1, maximum: 10_000 },
    RATE_LIMIT_ALONE_MAX_MS: { type: 'integer', minimum: 0, maximum: MAX_ALONE_MS },
    RATE_LIMIT_HEADERS: { type: 'boolean', default: true },
    CACHE_MAX_BYTES: { type: 'integer', minimum: 64 * 1024, maximum: 1024 * 1024 * 1024, default: DEFAULT_CACHE_MAX_BYTES },
    CACHE_ENTRY_MAX_BYTES: { type: 'integer', minimum: 1024, maximum: 256 * 1024 * 1024, default: DEFAULT_CACHE_ENTRY_MAX_BYTES },
    CACHE_REDIS_MAX_BYTES: { type: 'integer', minimum: 0, maximum: 16 * 1024 * 1024 * 1024, default: DEFAULT_CACHE_REDIS_MAX_BYTES },
    MEMORY_LIMIT_BYTES: { type: 'integer', minimum: 0 },
    MAX_IN_FLIGHT_REQUESTS: { type: 'integer', minimum: 0, maximum: 1_000_000, default: DEFAULT_MAX_IN_FLIGHT_REQUESTS },
    MAX_CONNECTIONS: { type: 'integer', minimum: 0, maximum: 1_000_000, default: DEFAULT_MAX_CONNECTIONS },
    ADMIN_MAX_CONNECTIONS: { type: 'integer', minimum: 4, maximum: 1000, default: DEFAULT_ADMIN_MAX_CONNECTIONS },
    ACCESS_LOG: { type: 'boolean', default: false },
    STATUS_ENDPOINT: { type: 'boolean', default: true },
    STATUS_FROM: { type: 'string', enum: STATUS_FROM, default: 'loopback' },
    STATE_DIR: { type: 'string' },
    ALLOWED_ROUTES: { type: 'string' },
    TEST_ORDERS: { type: 'boolean', default: false },
    LOG_FORMAT: logFormat,
    LOG_LEVEL: logLevel
  }
} as const

/** The shape of one property this project's schemas use. */
interface Property {
  readonly type: 'string' | 'integer' | 'boolean'
  readonly enum?: readonly string[]
  readonly default?: unknown
}
type ValueOf<P> =
  P extends { readonly enum: ReadonlyArray<infer E> } ? E
    : P extends { readonly type: 'string' } ? string
      : P extends { readonly type: 'integer' } ? number
        : P extends { readonly type: 'boolean' } ? boolean
          : never
type Props<S> = S extends { readonly properties: infer P extends Record<string, Property> } ? P : never

/** What env-schema returns for a schema: a variable with a default is always there, one without may be missing. */
export type EnvOf<S> = {
  -readonly [K in keyof Props<S> as Props<S>[K] extends { readonly default: unknown } ? K : never]: ValueOf<Props<S>[K]>
} & {
  -readonly [K in keyof Props<S> as Props<S>[K] extends { readonly default: unknown } ? never : K]?: ValueOf<Props<S>[K]>
}

/** The sidecar's environment as the schema types it. */
export type RawEnv = EnvOf<typeof schema>
