/** Nearest-rank percentile of sorted values (p in 0..100). */
export function percentile (sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return NaN
  const rank = Math.ceil((p / 100) * sorted.length)
  return sorted[Math.min(sorted.length, Math.max(1, rank)) - 1] as number
}

export function median (values: readonly number[]): number {
  const v = values.filter((x) => Number.isFinite(x)).sort((a, b) => a - b)
  if (v.length === 0) return NaN
  const mid = v.length >> 1
  return v.length % 2 === 1 ? v[mid] as number : ((v[mid - 1] as number) + (v[mid] as number)) / 2
}

export function ratio (a: number, b: number): number {
  return Number.isFinite(a) && Number.isFinite(b) && b !== 0 ? a / b : NaN
}

/** A figure for a table: fixed digits, or '–' when there is none. */
export const f = (v: number, digits = 1): string => Number.isFinite(v) ? v.toFixed(digits) : '–'
/** A ratio for a table: "1.23 ×", or '–'. */
export const fx = (v: number): string => Number.isFinite(v) ? `${v.toFixed(2)} ×` : '–'
