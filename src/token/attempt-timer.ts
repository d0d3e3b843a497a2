// The token manager's refresh schedule: one pending timer, for the refresh ahead of expiry
// or for a retry after a failure.
import type { Clock } from '../clock.js'

export type AttemptKind = 'refresh' | 'retry'

/** At most one attempt pending: scheduling another replaces it. */
export class AttemptTimer {
  readonly #clock: Clock
  readonly #onDue: () => void
  #cancel: (() => void) | undefined
  #kind: AttemptKind | undefined
  #nextAttemptAt: number | undefined

  constructor (clock: Clock, onDue: () => void) {
    this.#clock = clock
    this.#onDue = onDue
  }

  /** What the pending timer is for; undefined once it has fired or none is pending. */
  get kind (): AttemptKind | undefined { return this.#kind }

  /** Monotonic: when the pending attempt is due. Kept after the timer fires, until clear(). */
  get nextAttemptAt (): number | undefined { return this.#nextAttemptAt }

  schedule (delayMs: number, kind: AttemptKind): void {
    this.#cancel?.()
    this.#nextAttemptAt = this.#clock.now() + delayMs
    this.#kind = kind
    this.#cancel = this.#clock.setTimer(() => {
      this.#cancel = undefined
      this.#kind = undefined
      this.#onDue()
    }, delayMs)
  }

  /** Nothing pending any more: the timer cancelled and its instant forgotten. */
  clear (): void {
    this.#cancel?.()
    this.#cancel = undefined
    this.#kind = undefined
    this.#nextAttemptAt = undefined
  }
}
