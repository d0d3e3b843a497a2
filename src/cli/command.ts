/** One command of the command line, for its help. */
export interface Command {
  /** Positional arguments, for the usage line. */
  readonly args?: string
  readonly maxArgs: number
  readonly summary: string
  readonly details: string
}

export const CONFIG_POINTER = 'Configuration comes from environment variables only: "help config" lists each with its default\n' +
  'and meaning (README.md\'s "Configuration" table says more); "check-config" validates them.'
