const LISTEN_ERRORS: Record<string, string> = {
  EADDRINUSE: 'the address is already in use (another process, or the other listener, holds it)',
  EACCES: 'permission denied (ports below 1024 need privileges)',
  EADDRNOTAVAIL: 'the address is not one of this machine\'s',
  ENOTFOUND: 'the host name does not resolve',
  EAI_AGAIN: 'the host name could not be resolved (name resolution failed)',
  EAI_FAIL: 'the host name could not be resolved (name resolution failed)',
  EAI_NONAME: 'the host name does not resolve'
}

/**
 * One line for a listener that could not start, naming the variables that chose the
 * address: `PORT=8080 (HOST=127.0.0.1): cannot listen on 127.0.0.1:8080: the address is
 * already in use (EADDRINUSE)`.
 */
export function listenFailure (
  names: { host: string, port: string }, host: string, port: number, err: unknown
): string {
  const code = (err as NodeJS.ErrnoException | undefined)?.code
  const why = (code !== undefined ? LISTEN_ERRORS[code] : undefined) ?? String((err as Error | undefined)?.message ?? err)
  const address = host.includes(':') && !host.startsWith('[') ? `[${host}]:${port}` : `${host}:${port}`
  const variable = code === 'ENOTFOUND' || (code?.startsWith('EAI_') ?? false) || code === 'EADDRNOTAVAIL'
    ? `${names.host}=${host}`
    : `${names.port}=${port} (${names.host}=${host})`
  return `${variable}: cannot listen on ${address}: ${why}${code !== undefined ? ` (${code})` : ''}`
}
