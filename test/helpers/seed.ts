// Seeds for generated tests: CI's comes from the commit under test, so every commit explores
// new cases and any failure replays from the seed it prints.
import { execFileSync } from 'node:child_process'

/** `override` (an environment variable's value) if set, else the commit's first 32 bits, else `fallback` (no git). */
export function commitSeed (override: string | undefined, fallback: number): number {
  if (override !== undefined) return Number(override)
  try {
    return Number.parseInt(execFileSync('git', ['rev-parse', 'HEAD'], { encoding: 'utf8' }).slice(0, 8), 16) | 0
  } catch {
    return fallback
  }
}
