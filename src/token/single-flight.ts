// The token manager's requests, one at a time: each numbered (its generation) and timed
// from its send on both clocks, its outcome handed to the manager before it counts as done.
import type { Clock } from '../clock.js'
import type { FetchedToken } from './token-client.js'

/** One token request's number and when it was sent, on the monotonic and the wall clock. */
export interface Sent {
  readonly generation: number
  readonly sentAt: number
  readonly sentWallAt: number
}

export interface Outcomes {
  succeeded: (fetched: FetchedToken, sent: Sent) => void
  failed: (err: unknown, sentAt: number) => void
}

/** Holds the token request in flight, if any; the manager sends the next only when none is. */
export class SingleFlight {
  readonly #fetchToken: () => Promise<FetchedToken>
  readonly #clock: Clock
  readonly #outcomes: Outcomes
  #inflight: Promise<void> | undefined
  #generation = 0

  constructor (fetchToken: () => Promise<FetchedToken>, clock: Clock, outcomes: Outcomes) {
    this.#fetchToken = fetchToken
    this.#clock = clock
    this.#outcomes = outcomes
  }

  /** The request in flight: settles once its outcome has been handled, and never rejects. */
  get inflight (): Promise<void> | undefined { return this.#inflight }

  /** Sends a new request; the caller has checked that none is in flight. */
  send (): Promise<void> {
    const sent: Sent = { generation: ++this.#generation, sentAt: this.#clock.now(), sentWallAt: this.#clock.wallNow() }
    const attempt = this.#fetchToken().then(
      (fetched) => { this.#outcomes.succeeded(fetched, sent) },
      (err: unknown) => { this.#outcomes.failed(err, sent.sentAt) }
    )
    this.#inflight = attempt.finally(() => { this.#inflight = undefined })
    return this.#inflight
  }
}
