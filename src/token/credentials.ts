import { credentialProblem, trimCredential, type CredentialSource } from '../config/credentials.js'
import { readSecretFile } from '../config/secret-file.js'
import type { Credentials } from './token-client.js'

export type ReadFile = (path: string) => Promise<string>

/** Where a credential comes from, for logs and /status: the variable in use, and the file's path. Never the value. */
export interface CredentialOrigin {
  variable: string
  file?: string
}

export function credentialOrigin (name: 'CLIENT_ID' | 'CLIENT_SECRET', source: CredentialSource): CredentialOrigin {
  return 'file' in source ? { variable: `${name}_FILE`, file: source.file } : { variable: name }
}

/**
 * Returns the current credentials. Values from files are read again on every call
 * (once per token request): Kubernetes rotates mounted secrets in place, and the
 * next token request must use the new value with no restart and no file watcher.
 * Files are read asynchronously, regular files only and size-capped (secret-file.ts):
 * a path that became a FIFO or a device fails that token request, never the
 * process nor the event loop.
 */
export function createCredentialReader (
  clientId: CredentialSource, clientSecret: CredentialSource, readFile: ReadFile = readSecretFile
): () => Promise<Credentials> {
  const read = async (name: string, source: CredentialSource): Promise<string> => {
    if ('value' in source) return source.value
    let content: string
    try {
      content = await readFile(source.file)
    } catch (err) {
      // secret-file.ts's messages name the path and the problem, never the content.
      throw new Error(`${name}_FILE: ${(err as Error).message}`)
    }
    const value = trimCredential(content)
    const problem = credentialProblem(value)
    // The message names the variable, never the value.
    if (problem !== undefined) throw new Error(`${name}_FILE: the file's content: ${problem}`)
    return value
  }
  return async () => {
    const [id, secret] = await Promise.all([read('CLIENT_ID', clientId), read('CLIENT_SECRET', clientSecret)])
    return { clientId: id, clientSecret: secret }
  }
}

/** The credential settings actually in use, for the operator: `CLIENT_ID and CLIENT_SECRET_FILE (/run/secrets/...)`. */
export function credentialsInUse ({ clientId, clientSecret }: { clientId: CredentialOrigin, clientSecret: CredentialOrigin }): string {
  const named = (origin: CredentialOrigin): string => origin.file === undefined ? origin.variable : `${origin.variable} (${origin.file})`
  return `${named(clientId)} and ${named(clientSecret)}`
}
