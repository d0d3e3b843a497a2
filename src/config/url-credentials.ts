/**
 * A URL's user and password as they are sent (percent-decoded), or undefined when either holds a
 * `%` not followed by two hex digits (or bytes that are not UTF-8): the WHATWG parser keeps such
 * a `%` as it is, and decoding it later throws URIError wherever that happens (ioredis's parser,
 * the egress proxy's Basic credentials), so it is refused here, where the variable can be named.
 */
export function userInfo (url: URL): { username: string, password: string } | undefined {
  try {
    return { username: decodeURIComponent(url.username), password: decodeURIComponent(url.password) }
  } /* Stryker disable next-line BlockStatement: equivalent: an empty catch returns undefined too */ catch {
    return undefined
  }
}

/** What to say of such a URL: never its value, which may hold a password. */
export const BAD_ESCAPE = 'has a % not followed by two hex digits in its user or password: write a literal % as %25 (the value is not shown: it may hold a password)'
