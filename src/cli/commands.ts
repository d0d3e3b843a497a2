// The command line: the commands and their help, and argv parsed into what to do.
import { parseArgs } from 'node:util'
import { buildInfo } from '../config/build-info.js'
import { CONFIG_POINTER, type Command } from './command.js'
import { variablesHelp } from './variables.js'

const SIDECAR_COMMANDS: Record<string, Command> = {
  serve: {
    maxArgs: 0,
    summary: 'run the sidecar (the default when no command is given)',
    details: `Runs the sidecar: the proxy listener on HOST:PORT (default 127.0.0.1:8080), and
/livez, /readyz, /metrics on ADMIN_HOST:ADMIN_PORT (default 0.0.0.0:9090). Needs AUTH_URL,
UPSTREAM_URL, CLIENT_ID or CLIENT_ID_FILE, CLIENT_SECRET or CLIENT_SECRET_FILE. SIGTERM or
SIGINT: stop being ready, finish in-flight requests (SHUTDOWN_GRACE_MS), exit 0.
Exits 1 on a bad configuration or a port it cannot listen on, with one line saying why.`
  },
  'check-config': {
    maxArgs: 0,
    summary: 'validate the configuration, print it without credentials, and exit (0 valid, 1 not)',
    details: `Checks every variable the sidecar reads, as serve would, without listening or asking
for a token: every problem is named at once, never a credential's value. Also checks what
can be seen without listening, such as PORT equal to ADMIN_PORT on overlapping addresses.`
  },
  healthcheck: {
    args: '[URL]',
    maxArgs: 1,
    summary: 'exit 0 if URL (default: this sidecar\'s admin /readyz) answers 2xx, else 1 and why',
    details: `For container HEALTHCHECKs: needs only node (no shell, no curl). Asks URL, by default
http://127.0.0.1:$ADMIN_PORT/readyz (ADMIN_HOST when it is not a wildcard), with a 3 s
limit, and prints one line: what answered, or what failed (refused, timeout, the status and
the /readyz reason). Exit 0 for a 2xx answer, 1 otherwise.`
  },
}

const HELP_COMMANDS: Record<string, Command> = {
  help: {
    args: '[COMMAND | config]',
    maxArgs: 1,
    summary: 'this text, a command\'s (also --help, -h, after any command too), or the variables',
    details: 'Prints the commands, what one command does, or (help config) every configuration variable.'
  },
  version: {
    maxArgs: 0,
    summary: 'print the version, the source revision and the Node.js version (also --version, -v)',
    details: `Prints "store-auth-proxy <version> (revision <revision>, node <version>)": the version from
package.json, the revision written into dist/REVISION at build time ("unknown" without one).`
  }
}

export type Commands = Readonly<Record<string, Command>>

/** `help config`: the variables, for wherever README.md is not (the image). */
const CONFIG_TOPIC = 'config'

/** Every command, in the order the usage lists them: the sidecar's, then `more` (the demo's), then help and version. */
export function commandTable (more: Commands): Commands {
  return { ...SIDECAR_COMMANDS, ...more, ...HELP_COMMANDS }
}

export function versionLine (): string {
  const { version, revision, node } = buildInfo()
  return `store-auth-proxy ${version} (revision ${revision}, node ${node})\n`
}

function usage (commands: Commands): string {
  const rows = Object.entries(commands).map(([name, c]) => [`${name}${c.args === undefined ? '' : ` ${c.args}`}`, c.summary] as const)
  const width = Math.max(...rows.map(([left]) => left.length))
  return `${versionLine()}
Usage: node dist/main.js [COMMAND] [ARGS] [--help]

Commands:
${rows.map(([left, summary]) => `  ${left.padEnd(width)}  ${summary}`).join('\n')}

Options (with any command):
  -h, --help     print help and exit 0
  -v, --version  print the version and exit 0

${CONFIG_POINTER}
`
}

function commandHelp (name: string, command: Command): string {
  return `Usage: node dist/main.js ${name}${command.args === undefined ? '' : ` ${command.args}`}

${command.summary}

${command.details}

${CONFIG_POINTER}
`
}

export type Invocation =
  | { kind: 'run', command: string, args: string[] }
  | { kind: 'help', text: string }
  | { kind: 'version' }
  | { kind: 'error', message: string }

/** `[COMMAND] [ARGS] [--help | --version]`; `--help` anywhere wins, and runs nothing. */
export function parseInvocation (argv: string[], commands: Commands): Invocation {
  const { values, positionals, tokens } = parseArgs({
    args: argv,
    options: { help: { type: 'boolean', short: 'h' }, version: { type: 'boolean', short: 'v' } },
    allowPositionals: true,
    strict: false,
    tokens: true
  })
  const name = positionals[0] ?? 'serve'
  const command = commands[name]
  if (command === undefined) return { kind: 'error', message: `unknown command "${name}"` }
  if (values.help === true) return { kind: 'help', text: name === 'help' || positionals.length === 0 ? usage(commands) : commandHelp(name, command) }
  if (values.version === true) return { kind: 'version' }
  const unknown = tokens.find((token) => token.kind === 'option' && token.name !== 'help' && token.name !== 'version')
  if (unknown?.kind === 'option') return { kind: 'error', message: `unknown option "${unknown.rawName}"` }
  const args = positionals.slice(1)
  if (args.length > command.maxArgs) return { kind: 'error', message: `${name}: unexpected argument "${args[command.maxArgs] ?? ''}"` }
  if (name === 'version') return { kind: 'version' }
  if (name === 'help') {
    const topic = args[0]
    if (topic === undefined) return { kind: 'help', text: usage(commands) }
    if (topic === CONFIG_TOPIC) return { kind: 'help', text: variablesHelp() }
    const about = commands[topic]
    return about === undefined ? { kind: 'error', message: `unknown command "${topic}"` } : { kind: 'help', text: commandHelp(topic, about) }
  }
  return { kind: 'run', command: name, args }
}
