// Our credentials refused, by the token endpoint (`rejected`: 400/401 invalid_client) or
// by the egress proxy (`proxy_rejected`: its 407): an operator's error that retrying fast
// cannot fix, and fast retries would hammer whoever refused. The token manager hands each
// refusal here and gets the delay before its next attempt.
import type { Logger } from 'pino'
import { credentialsInUse, type CredentialOrigin } from './credentials.js'
import { backoffDelay } from './schedule.js'
import type { TokenOutcome, TokenRequestError } from './token-client.js'

export type Refusal = Extract<TokenOutcome, 'rejected' | 'proxy_rejected'>

export function isRefusal (outcome: TokenOutcome): outcome is Refusal {
  return outcome === 'rejected' || outcome === 'proxy_rejected'
}

export interface RefusalOptions {
  log: Logger
  /** The token endpoint's URL, named in the lines (it carries no credential). */
  tokenUrl: string | undefined
  credentials: { clientId: CredentialOrigin, clientSecret: CredentialOrigin }
  rejectedRetryMs: number
  random: () => number
}

/**
 * The pacing after refusals. The first refusal of a run (of either kind) is retried at
 * once: a request sent just before a secret was rotated in place carries the old secret,
 * and the retry reads the new one; an egress proxy's 407 may be its authentication backend's
 * passing fault. Every refusal after it waits rejectedRetryMs, with one ERROR per kind
 * and incident. A success or another kind of failure ends the run.
 */
export function createRefusals ({ log, tokenUrl, credentials, rejectedRetryMs, random }: RefusalOptions) {
  /** The refusal that started the current run, if any. */
  let first: TokenRequestError | undefined
  /** Refused again after the quick retry, by the token endpoint; by the egress proxy. */
  let byEndpoint = false
  let byEgressProxy = false
  const variables = [credentials.clientId.variable, credentials.clientSecret.variable]
  // The variable that holds the egress proxy's URL, user and password, for the token endpoint's scheme.
  const egressProxyVariable = tokenUrl?.startsWith('http:') === true ? 'HTTP_PROXY' : 'HTTPS_PROXY'

  /** Returns the delay before the next attempt. */
  function refused (error: TokenRequestError): number {
    const egressProxy = error.outcome === 'proxy_rejected'
    const fields = egressProxy
      ? { url: tokenUrl, reason: error.message }
      : { url: tokenUrl, oauthError: error.oauthError, statusCode: error.statusCode, credentials: variables }
    if (first === undefined) {
      first = error
      const retryInMs = backoffDelay(1, random())
      // A directive reaches only the mutants on the first line of the node it precedes: one line.
      // Stryker disable next-line StringLiteral: log wording
      const message = egressProxy ? 'egress proxy refused our credentials; retrying once' : 'token endpoint rejected the client credentials; retrying once with the credentials read again'
      log.warn({ ...fields, retryInMs }, message)
      return retryInMs
    }
    // One clear ERROR per incident; the retries that follow are only debug noise.
    if (egressProxy ? !byEgressProxy : !byEndpoint) {
      log.error({ ...fields, retryInMs: rejectedRetryMs }, egressProxy
        ? `egress proxy refused our credentials; check the user and password in ${egressProxyVariable}`
        : `token endpoint rejected the client credentials; check ${credentialsInUse(credentials)}`)
    } else {
      // Stryker disable next-line StringLiteral: a debug line's wording
      log.debug({ outcome: error.outcome, oauthError: error.oauthError, retryInMs: rejectedRetryMs }, 'credentials still refused')
    }
    if (egressProxy) byEgressProxy = true
    else byEndpoint = true
    return rejectedRetryMs
  }

  /** A token arrived: whoever refused accepts our credentials again. */
  function accepted (): void {
    // Stryker disable next-line StringLiteral: log wording
    if (byEndpoint) log.info('token endpoint accepts the client credentials again')
    // Stryker disable next-line StringLiteral: log wording
    if (byEgressProxy) log.info('egress proxy accepts our credentials again')
    first = undefined
    byEndpoint = false
    byEgressProxy = false
  }

  return {
    refused,
    accepted,
    /** Another kind of failure: the next refusal starts a new run. */
    interrupted (): void { first = undefined },
    /** The last failure was a refusal: callers must not start early attempts. */
    inRun: (): boolean => first !== undefined,
    /** The token endpoint refused the client credentials again after the quick retry (/readyz, /status). */
    credentialsRejected: (): boolean => byEndpoint
  }
}
