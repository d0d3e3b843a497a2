// The demo commands' names and help, for the command line (src/cli/commands.ts): data only,
// so that listing them loads nothing of the demo (src/demo/commands.ts runs them).
import type { Command } from '../cli/command.js'

export const DEMO_COMMANDS: Record<string, Command> = {
  demo: {
    maxArgs: 0,
    summary: 'the stand-in TI APIs and the sidecar in front of them, on this machine (npm run demo)',
    details: `Starts, in one process, the stand-in TI OAuth and store APIs on 127.0.0.1:$STAND_IN_PORT
(default 8081) with demo credentials, and the sidecar in front of them on PORT and
ADMIN_PORT (admin on 127.0.0.1), with budgets and a cached catalog (RATE_LIMITS set by the
demo). Prints a tour: commands to try, each with what to look for. Ctrl-C stops it.`
  },
  'stand-in': {
    maxArgs: 0,
    summary: 'the stand-in TI OAuth and store APIs alone (docker-compose)',
    details: `Listens on STAND_IN_HOST:STAND_IN_PORT (default 127.0.0.1:8081). Other variables:
STAND_IN_CLIENT_ID, STAND_IN_CLIENT_SECRET or STAND_IN_CLIENT_SECRET_FILE,
STAND_IN_TOKEN_LIFETIME_MS, STAND_IN_STYLE (ti or apigee), LOG_LEVEL, LOG_FORMAT.`
  },
  caller: {
    maxArgs: 0,
    summary: 'the example caller service: calls the store API through the sidecar (docker-compose)',
    details: `Every CALLER_INTERVAL_MS (default 5000) calls CALLER_TARGET_URL (default
http://localhost:8080/v2/store/products/LM358BIDR?currency=USD), with CALLER_TIMEOUT_MS, and
logs the answer.`
  }
}
