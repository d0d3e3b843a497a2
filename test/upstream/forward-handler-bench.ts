// ForwardHandler on a bench, driven as undici drives it: a caller's response that records
// what it was told, undici's controller counting what it is asked, and hooks that record
// their calls in order. Shared by the files that test the exchange on its own.
import { EventEmitter } from 'node:events'
import FakeTimers from '@sinonjs/fake-timers'
import type { Test } from 'tap'
import type { Dispatcher } from 'undici'
import type { ForwardContext, ForwardHooks } from '../../src/upstream/forward-handler.js'

interface CallerOptions {
  /** Destroyed before the exchange begins (its 'close' is the test's to emit). */
  destroyed?: boolean
  /** Every write reports a full buffer. */
  full?: boolean
  /** writeHead throws, as Node does for a head that is not valid HTTP. */
  refusesHead?: boolean
}

/** A caller's response. */
export function callerResponse ({ destroyed = false, full = false, refusesHead = false }: CallerOptions = {}) {
  const res = Object.assign(new EventEmitter(), {
    destroyed,
    /** The caller's connection, open (a real one: the test of a caller closing its side). */
    req: { socket: { destroyed: false, writable: true } as { destroyed?: boolean, writable?: boolean } },
    headersSent: false,
    written: [] as Buffer[],
    ended: false,
    writeHead (statusCode: number) {
      if (refusesHead) throw new TypeError('invalid header')
      res.headersSent = true
      res.statusCode = statusCode
      return res
    },
    statusCode: 0,
    write (chunk: Buffer) { res.written.push(chunk); return !full },
    end () { res.ended = true; res.emit('finish') },
    flushHeaders () {},
    destroy () { res.destroyed = true }
  })
  return res
}

/** The caller leaves: its response is destroyed, then closes. */
export function leave (res: ReturnType<typeof callerResponse>): void {
  res.destroyed = true
  res.emit('close')
}

/** undici's controller for one exchange, counting what the handler asks of it. */
export function controller () {
  const seen = { aborted: undefined as Error | undefined, pauses: 0, resumes: 0 }
  const c = {
    abort (err: Error) { seen.aborted = err },
    pause () { seen.pauses++ },
    resume () { seen.resumes++ }
  } as unknown as Dispatcher.DispatchController
  return { c, seen }
}

export const context = (over: Partial<ForwardContext> = {}): ForwardContext => ({
  saturated: () => true,
  enterQueue: () => {},
  leaveQueue: () => {},
  queueTimeoutMs: 60_000,
  timeoutMs: 60_000,
  resets: { watch: () => {}, resetting: () => false },
  ...over
})

/** A connection that undici is ending on a reset as the answer ends. */
export const resetting = (): ForwardContext => context({ resets: { watch: () => {}, resetting: () => true } })

export function hooks (over: Partial<ForwardHooks> = {}) {
  const seen = { unsent: 0, sending: 0, failed: [] as Error[], held: 0, started: 0, truncated: 0, calls: [] as string[] }
  const h: ForwardHooks = {
    holds: () => false,
    held: () => { seen.held++; seen.calls.push('held') },
    unsent: () => { seen.unsent++; seen.calls.push('unsent') },
    sending: () => {
      seen.sending++
      return undefined
    },
    failed: (err) => { seen.failed.push(err); seen.calls.push('failed') },
    started: () => { seen.started++ },
    truncated: () => { seen.truncated++ },
    ...over
  }
  return { h, seen }
}

/** Node's timers faked for one test (the exchange's queue and final-answer timers are global ones). */
export function fakeTimers (t: Test) {
  const clock = FakeTimers.install({ toFake: ['setTimeout', 'clearTimeout'] })
  t.teardown(() => { clock.uninstall() })
  return clock
}
