import { get as httpGet } from 'node:http'
import { get as httpsGet } from 'node:https'

/**
 * Whether `url` answers 2xx within `timeoutMs`: the `healthcheck` command's probe, for
 * container HEALTHCHECKs that have no shell and no curl. node:http alone, so that a check
 * costs a few milliseconds of CPU instead of loading fetch (internal undici) or the sidecar.
 */
export function answersOk (url: string, timeoutMs: number): Promise<boolean> {
  return new Promise((resolve) => {
    let target: URL
    try {
      target = new URL(url)
    } catch {
      resolve(false)
      return
    }
    const get = target.protocol === 'https:' ? httpsGet : httpGet
    const request = get(target, { timeout: timeoutMs, agent: false }, (response) => {
      const status = response.statusCode ?? 0
      response.resume()
      resolve(status >= 200 && status < 300)
    })
    request.on('timeout', () => { request.destroy(new Error('timed out')) })
    request.on('error', () => { resolve(false) })
  })
}
