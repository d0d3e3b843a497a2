import { readFileSync } from 'node:fs'
import { join } from 'node:path'

/**
 * The node flags the sidecar ships with, read from the image's ENTRYPOINT in DIR's Dockerfile
 * (`["/nodejs/bin/node", "--max-semi-space-size=4", "--expose-gc", "/app/dist/bundle/main.js"]`, or dist/main.js). `npm start` (the
 * launcher, src/launch.ts) applies the same flags (test/deploy/shipped.test.ts checks), so the
 * benchmark and the soak run the sidecar as it runs in production.
 */
export function shippedNodeFlags (dir: string): string[] {
  const dockerfile = readFileSync(join(dir, 'Dockerfile'), 'utf8')
  const entrypoint = /^ENTRYPOINT (\[.*\])$/m.exec(dockerfile)?.[1]
  const command = entrypoint === undefined ? [] : JSON.parse(entrypoint) as unknown[]
  if (command.length < 2 || !/dist\/(bundle\/)?main\.js$/.test(String(command[command.length - 1]))) {
    throw new Error(`${dir}/Dockerfile: ENTRYPOINT is not ["node", flags..., ".../dist/main.js" or ".../dist/bundle/main.js"]: ${entrypoint ?? 'none'}`)
  }
  return command.slice(1, -1).map(String)
}
