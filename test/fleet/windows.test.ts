// The fixed-window oracle the fleet tests count the upstream's arrivals with: it must
// accept what some alignment of fixed windows allows and refuse what none does.
import t from 'tap'
import { fitsFixedWindows } from './fleet.js'

const burst = (at: number, n: number, spacing = 1): number[] => Array.from({ length: n }, (_, i) => at + i * spacing)

// Limit 20 per 2000 ms, no jitter: the exact semantics.
const EXACT: Array<{ name: string, times: number[], ok: boolean }> = [
  { name: 'nothing', times: [], ok: true },
  { name: 'the limit at once', times: burst(0, 20), ok: true },
  // A window boundary may fall anywhere: twice the limit at once is the end of one
  // window and the start of the next; twice the limit plus one fits no alignment.
  { name: 'twice the limit at once', times: burst(0, 40), ok: true },
  { name: 'twice the limit plus one at once', times: burst(0, 41), ok: false },
  { name: 'twice the limit plus one, spread over 1900 ms', times: burst(0, 41, 47), ok: false },
  { name: 'the limit, twice the limit 1 s later: no alignment fits', times: [...burst(0, 20), ...burst(1000, 40)], ok: false },
  { name: 'the limit per window, each window starting at its first request', times: [...burst(0, 20), ...burst(2500, 20), ...burst(4600, 20)], ok: true },
  { name: 'grid windows: the limit at the end of one and at the start of the next', times: [...burst(1900, 20), ...burst(2000, 20)], ok: true },
  { name: 'the limit three times, 1500 and 600 ms apart (a grid offset fits it)', times: [...burst(0, 20), ...burst(1500, 20), ...burst(2100, 20)], ok: true },
  { name: 'twice the limit plus one within a window', times: [...burst(0, 20), ...burst(1000, 21)], ok: false },
  { name: 'the limit three times 1000 ms apart', times: [...burst(0, 20), ...burst(1000, 20), ...burst(2000, 20)], ok: false },
  { name: 'the limit, then one more 2000 ms after the window\'s first', times: [...burst(0, 20), 2000], ok: true }
]
for (const c of EXACT) t.equal(fitsFixedWindows(c.times, 20, 2000, 0).ok, c.ok, `exact: ${c.name}`)

// With 150 ms between spending a point and the upstream seeing the request.
const JITTER: Array<{ name: string, times: number[], ok: boolean }> = [
  { name: 'an arrival late by up to the jitter', times: [...burst(0, 19), 2100, ...burst(2200, 20)], ok: true },
  { name: 'the budget spent once per sidecar of three', times: [...burst(0, 20), ...burst(500, 20), ...burst(1000, 20)], ok: false },
  { name: 'twice the limit plus one within W minus the jitter', times: burst(0, 41, 45), ok: false },
  { name: 'a steady stream at the limit\'s rate', times: burst(0, 100, 100), ok: true },
  { name: 'a steady stream at 1.2 times the limit\'s rate', times: burst(0, 120, 1000 / 12), ok: false }
]
for (const c of JITTER) t.equal(fitsFixedWindows(c.times, 20, 2000, 150).ok, c.ok, `jitter 150 ms: ${c.name}`)
