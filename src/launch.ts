#!/usr/bin/env node
// `npm start`: the sidecar as the image runs it, anywhere else (systemd, a VM, another base
// image). It replaces itself (execve: the same process id, no second process) with
// `node <the image's flags> dist/main.js <arguments>`, GLIBC_TUNABLES added to the environment
// (src/cli/shipped.ts), so signals reach the sidecar itself. Like src/main.ts, an entry point:
// it passes the environment on untouched, GLIBC_TUNABLES apart.
import { fileURLToPath } from 'node:url'
import { refuseUnsupportedRuntime } from './cli/runtime.js'
import { shippedCommand } from './cli/shipped.js'

refuseUnsupportedRuntime(process.version, process.stderr, process.exit)
const command = shippedCommand(process.execPath, fileURLToPath(new URL('./main.js', import.meta.url)), process.argv.slice(2), process.env)
// process.execve is there from Node.js 23.11 on (the check above), on every POSIX system.
if (process.execve === undefined) throw new Error('process.execve is not available on this platform')
process.execve(process.execPath, command.args, command.env)
