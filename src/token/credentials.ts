import { readFileSync } from 'node:fs'
import { credentialProblem, trimCredential, type CredentialSource } from '../config.js'
import type { Credentials } from './token-client.js'

export type ReadFile = (path: string) => string

/**
 * Returns the current credentials. Values from files are read again on every call
 * (once per token request): Kubernetes rotates mounted secrets in place, and the
 * next token request must use the new value with no restart and no file watcher.
 */
export function createCredentialReader (
  clientId: CredentialSource, clientSecret: CredentialSource, readFile: ReadFile = (p) => readFileSync(p, 'utf8')
): () => Credentials {
  const read = (name: string, source: CredentialSource): string => {
    if ('value' in source) return source.value
    const value = trimCredential(readFile(source.file))
    const problem = credentialProblem(value)
    // The message names the variable, never the value.
    if (problem !== undefined) throw new Error(`${name}_FILE: the file's content: ${problem}`)
    return value
  }
  return () => ({ clientId: read('CLIENT_ID', clientId), clientSecret: read('CLIENT_SECRET', clientSecret) })
}
