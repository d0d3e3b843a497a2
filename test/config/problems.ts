import { ConfigError } from '../../src/config/parse-env.js'

/** The problems a configuration loader names, or [] when it loads; any other error is thrown. */
export function problemsOf (load: () => unknown): string[] {
  try {
    load()
  } catch (err) {
    if (err instanceof ConfigError) return [...err.problems]
    throw err
  }
  return []
}
