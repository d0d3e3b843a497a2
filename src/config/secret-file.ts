import { closeSync, constants, fstatSync, openSync, readSync, type Stats } from 'node:fs'
import { open } from 'node:fs/promises'

/** A credential file larger than this is not a credential (and `/dev/zero` must fail fast). */
export const SECRET_FILE_MAX_BYTES = 64 * 1024

// O_NONBLOCK: opening a FIFO for reading otherwise blocks until a writer appears —
// forever, on a libuv thread-pool thread (async) or the event loop (sync). With it
// the open returns at once and fstat tells what the path really is. O_NOCTTY: a
// terminal device never becomes the controlling terminal.
const OPEN_FLAGS = constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY

/**
 * Why a secret file cannot be used. The message names the path and the problem,
 * never a byte of the content.
 */
export class SecretFileError extends Error {
  readonly path: string
  constructor (path: string, problem: string) {
    super(`cannot read ${path}: ${problem}`)
    this.name = 'SecretFileError'
    this.path = path
  }
}

function kindOf (stats: Stats): string {
  if (stats.isDirectory()) return 'a directory'
  if (stats.isFIFO()) return 'a FIFO'
  if (stats.isCharacterDevice()) return 'a character device'
  if (stats.isBlockDevice()) return 'a block device'
  if (stats.isSocket()) return 'a socket'
  return 'not a regular file'
}

/** The problem with what fstat found at the path, if any. */
function statProblem (stats: Stats): string | undefined {
  if (!stats.isFile()) return `it is ${kindOf(stats)}, not a regular file`
  if (stats.size > SECRET_FILE_MAX_BYTES) return `it is larger than ${SECRET_FILE_MAX_BYTES} bytes`
  return undefined
}

function openProblem (err: unknown): string {
  const code = (err as NodeJS.ErrnoException).code ?? 'error'
  const meaning: Record<string, string> = {
    ENOENT: 'no such file',
    EACCES: 'permission denied',
    EISDIR: 'it is a directory',
    ENXIO: 'no such device',
    ELOOP: 'too many symbolic links'
  }
  return meaning[code] === undefined ? code : `${meaning[code]} (${code})`
}

function tooLarge (): string {
  return `it is larger than ${SECRET_FILE_MAX_BYTES} bytes`
}

/** One read the loop below asks for: into `buffer` at `offset`, at most `length` bytes. */
interface ReadRequest { buffer: Buffer, offset: number, length: number }

/**
 * The read loop both readers share, whatever does the reading: it asks for reads (yields)
 * and is given the bytes read, until end of file. It reads one byte more than allowed,
 * so a file that grew since fstat is caught too.
 */
function * readCapped (path: string): Generator<ReadRequest, string, number> {
  const buffer = Buffer.alloc(SECRET_FILE_MAX_BYTES + 1)
  let length = 0
  for (;;) {
    const bytesRead = yield { buffer, offset: length, length: buffer.length - length }
    if (bytesRead === 0) break
    length += bytesRead
    if (length > SECRET_FILE_MAX_BYTES) throw new SecretFileError(path, tooLarge())
  }
  return buffer.toString('utf8', 0, length)
}

/** Any failure while reading, as a SecretFileError. */
function readProblem (path: string, err: unknown): SecretFileError {
  return err instanceof SecretFileError ? err : new SecretFileError(path, openProblem(err))
}

/**
 * Reads a small secret file (CLIENT_SECRET_FILE and the like) without ever
 * blocking: only regular files, at most SECRET_FILE_MAX_BYTES. Symbolic links are
 * followed (Kubernetes mounts secrets through them); what they lead to is checked.
 * Rejects with a SecretFileError.
 */
export async function readSecretFile (path: string): Promise<string> {
  let handle
  try {
    handle = await open(path, OPEN_FLAGS)
  } catch (err) {
    throw new SecretFileError(path, openProblem(err))
  }
  try {
    const problem = statProblem(await handle.stat())
    if (problem !== undefined) throw new SecretFileError(path, problem)
    const reads = readCapped(path)
    let step = reads.next()
    while (step.done !== true) {
      const { buffer, offset, length } = step.value
      step = reads.next((await handle.read(buffer, offset, length, null)).bytesRead)
    }
    return step.value
  } catch (err) {
    throw readProblem(path, err)
  } finally {
    await handle.close()
  }
}

/** readSecretFile for start-up checks that run before the event loop matters (check-config). */
export function readSecretFileSync (path: string): string {
  let fd: number
  try {
    fd = openSync(path, OPEN_FLAGS)
  } catch (err) {
    throw new SecretFileError(path, openProblem(err))
  }
  try {
    const problem = statProblem(fstatSync(fd))
    if (problem !== undefined) throw new SecretFileError(path, problem)
    const reads = readCapped(path)
    let step = reads.next()
    while (step.done !== true) {
      const { buffer, offset, length } = step.value
      step = reads.next(readSync(fd, buffer, offset, length, null))
    }
    return step.value
  } catch (err) {
    throw readProblem(path, err)
  } finally {
    closeSync(fd)
  }
}
