// The model's never-over check (G1): how many sends, or arrivals, stand within one window.
/** The most arrivals within any interval of `spanMs` (two pointers over sorted times), and where. */
export function busiest (times: number[], spanMs: number): { count: number, from: number } {
  let best = { count: 0, from: 0 }
  for (let i = 0, j = 0; j < times.length; j++) {
    while ((times[j] ?? 0) - (times[i] ?? 0) > spanMs) i++
    if (j - i + 1 > best.count) best = { count: j - i + 1, from: times[i] ?? 0 }
  }
  return best
}
