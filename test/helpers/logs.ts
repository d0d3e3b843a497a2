import { Writable } from 'node:stream'
import type { Logger } from 'pino'
import type { LogLevel } from '../../src/config/schema.js'
import { createLogger } from '../../src/logger.js'

/** The project's own logger, writing its JSON lines into memory for the test to read. */
export function captureLogs (level: LogLevel = 'trace') {
  const lines: string[] = []
  const stream = new Writable({
    write (chunk: Buffer, _encoding, callback) {
      lines.push(...chunk.toString('utf8').split('\n').filter((l) => l !== ''))
      callback()
    }
  })
  const log: Logger = createLogger(level, stream)
  return {
    log,
    lines,
    text: () => lines.join('\n'),
    entries: () => lines.map((l) => JSON.parse(l) as Record<string, unknown>)
  }
}
