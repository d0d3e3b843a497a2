// What `npm run demo` prints once it is up: a guided tour of what the sidecar is for, each
// step a command to paste and one line on what to look for. test/demo/tour.test.ts runs the
// commands as printed and checks every claim.

/**
 * The demo's budgets (RATE_LIMITS): the catalog, which TI allows once per 4 hours, kept for 4
 * hours and served a day beyond that; one product call a minute, small enough to see a call
 * refused with its Retry-After.
 */
export const DEMO_RATE_LIMITS = 'GET /v2/store/products/catalog 1/4h cache=4h stale=1d; GET /v2/store/products/* 1/1m'

export interface TourStep {
  readonly what: string
  readonly command: string
  readonly lookFor: string
}

export function demoTour (urls: { proxy: string, admin: string, standIn: string }): TourStep[] {
  const catalog = `curl -s -D - -o /dev/null ${urls.proxy}/v2/store/products/catalog`
  const product = `curl -i '${urls.proxy}/v2/store/products/LM358BIDR?currency=USD'`
  return [
    {
      what: 'The catalog (4 MB; headers only): fetched from TI, spending its budget of 1 per 4 hours, and stored',
      command: catalog,
      lookFor: 'Cache-Status: store-auth-proxy; fwd=miss; fwd-status=200; stored'
    },
    {
      what: 'The catalog again: answered from the cache; TI is not asked and no budget is spent',
      command: catalog,
      lookFor: 'Cache-Status: store-auth-proxy; hit (and the seconds left, ttl=), and Age: seconds since TI answered'
    },
    {
      what: 'A product, within its budget of 1 a minute: the token was added on the way',
      command: product,
      lookFor: '200 OK and the part\'s stock and prices'
    },
    {
      what: 'The same product again: past its budget, refused here and never sent to TI',
      command: product,
      lookFor: '429, Retry-After: the seconds until the budget has room, and "error":"UPSTREAM_RATE_LIMITED"'
    },
    {
      what: 'What the sidecar holds: the token\'s state, the budgets, the cache',
      command: `curl -s ${urls.admin}/status`,
      lookFor: '"rateLimits" with each rule and its limits, and "cache" with the stored catalog and its age'
    },
    {
      what: 'The store API itself, without the sidecar',
      command: `curl -i '${urls.standIn}/v2/store/products/LM358BIDR'`,
      lookFor: '401: no token'
    }
  ]
}

export function formatTour (urls: { proxy: string, admin: string, standIn: string }): string {
  const steps = demoTour(urls).map((step, i) => `  ${i + 1}. ${step.what}.
       $ ${step.command}
       Look for: ${step.lookFor}.
`)
  return `
  store-auth-proxy demo: the sidecar on ${urls.proxy} (no credentials needed: it adds the
  token), its admin port on ${urls.admin}, and a stand-in for TI's OAuth and store APIs on
  ${urls.standIn}. The budgets: ${DEMO_RATE_LIMITS}

${steps.join('\n')}
  More: curl -s ${urls.admin}/metrics | grep '^store_auth_proxy_'
  Ctrl-C stops it.

`
}
