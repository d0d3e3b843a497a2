import { unreadable, type ReadFileSync } from './parse-env.js'

/** Where a credential comes from: the environment, or a file re-read before each token request. */
export type CredentialSource = { readonly value: string } | { readonly file: string }

/** CLIENT_ID or CLIENT_SECRET and its `_FILE` twin: at most one, and a value the contract can carry. */
export function checkCredential (
  name: string, value: string | undefined, file: string | undefined, readFile: ReadFileSync, problems: string[]
): CredentialSource | undefined {
  const fileName = `${name}_FILE`
  if (value !== undefined && value !== '' && file !== undefined && file !== '') {
    problems.push(`${name}: set either ${name} or ${fileName}, not both`)
    return undefined
  }
  if (file !== undefined && file !== '') {
    let content: string
    try {
      content = readFile(file)
    } catch (err) {
      problems.push(unreadable(fileName, file, err))
      return undefined
    }
    const problem = credentialProblem(trimCredential(content))
    if (problem !== undefined) {
      problems.push(`${fileName}: in ${file}, ${problem.startsWith('is ') ? `the value ${problem}` : problem}`)
      return undefined
    }
    return Object.freeze({ file })
  }
  if (value === undefined || value === '') {
    problems.push(`${name}: is required (or ${fileName})`)
    return undefined
  }
  const problem = credentialProblem(value)
  if (problem !== undefined) {
    problems.push(`${name}: ${problem}`)
    return undefined
  }
  return Object.freeze({ value })
}

/** Kubernetes and compose secret files usually end with a newline that is not part of the value. */
export function trimCredential (content: string): string {
  return content.replace(/\r?\n$/, '')
}

/**
 * The contract sends the credentials without percent-encoding (§4.1 rule 2), so a
 * value with `&` or whitespace would corrupt the form body. Says what is wrong
 * without ever repeating the value.
 */
export function credentialProblem (value: string): string | undefined {
  if (value === '') return 'is empty'
  const chars = Array.from(value)
  const at = chars.findIndex((c) => characterKind(c) !== undefined)
  if (at === -1) return undefined
  // Stryker disable next-line StringLiteral: unreachable fallbacks: `at` is the index of a character characterKind names
  const kind = characterKind(chars[at] ?? '') ?? ''
  const more = chars.filter((c) => characterKind(c) !== undefined).length - 1
  return `character ${at + 1} of ${chars.length} is ${kind}` +
    (more > 0 ? ` (and ${more} more such character${more > 1 ? 's' : ''})` : '') +
    ": the contract's unencoded form body cannot carry whitespace, '&' or control characters"
}

const NAMED_CHARACTERS: Record<string, string> = {
  '\n': 'a newline', '\r': 'a carriage return', '\t': 'a tab', ' ': 'a space', '&': "an '&'", '\u00a0': 'a no-break space'
}

/** The kind of a character a credential cannot hold, or undefined when it may. */
function characterKind (c: string): string | undefined {
  const named = NAMED_CHARACTERS[c]
  if (named !== undefined) return named
  if (/\s/u.test(c)) return `a whitespace character (U+${(c.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')})`
  // eslint-disable-next-line no-control-regex
  if (/[\x00-\x1f\x7f]/.test(c)) return `a control character (U+${(c.codePointAt(0) ?? 0).toString(16).toUpperCase().padStart(4, '0')})`
  return undefined
}
