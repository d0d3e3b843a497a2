/** The token endpoint's path below AUTH_URL (the contract, §4.1). */
export const TOKEN_PATH = '/v1/oauth/accesstoken'

/**
 * Refuses a base URL that already ends in the path the sidecar or its callers add:
 * `AUTH_URL=https://transact.ti.com/v1/oauth/accesstoken` would ask
 * `.../v1/oauth/accesstoken/v1/oauth/accesstoken` and get 404 on every token request.
 * The message shows the URL to set instead (a URL never holds a credential: checkUrl
 * refuses user info). `url` is checkUrl's result: no query, no fragment, no trailing slash.
 */
export function checkBaseUrl (
  name: string, url: string | undefined, path: string, why: string, problems: string[]
): string | undefined {
  if (url === undefined) return undefined
  const { pathname } = new URL(url)
  if (!pathname.toLowerCase().endsWith(path)) return url
  const base = url.slice(0, url.length - path.length).replace(/\/+$/, '')
  problems.push(`${name}: must not end in ${path} (${why}): set ${name}=${base}`)
  return undefined
}

/** An http(s) URL without credentials (it is logged and shown in errors), and without a query unless allowed. */
export function checkUrl (
  name: string, value: string | undefined, problems: string[], { allowQuery = false } = {}
): string | undefined {
  if (value === undefined || value === '') {
    problems.push(`${name}: is required`)
    return undefined
  }
  let url: URL
  try {
    url = new URL(value)
  } catch {
    problems.push(`${name}: is not a valid URL`)
    return undefined
  }
  if (url.protocol !== 'http:' && url.protocol !== 'https:') {
    problems.push(`${name}: must be an http:// or https:// URL`)
    return undefined
  }
  if (url.username !== '' || url.password !== '') {
    // A URL is logged and shown in errors; credentials belong in CLIENT_ID / CLIENT_SECRET.
    problems.push(`${name}: must not contain credentials`)
    return undefined
  }
  if (allowQuery) return url.href
  if (url.search !== '' || url.hash !== '') {
    problems.push(`${name}: must not contain a query string or fragment`)
    return undefined
  }
  return url.href.replace(/\/+$/, '')
}
