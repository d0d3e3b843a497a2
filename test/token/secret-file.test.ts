import { execFileSync } from 'node:child_process'
import { writeFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { readSecretFile, readSecretFileSync, SECRET_FILE_MAX_BYTES } from '../../src/config/secret-file.js'

// A secret file that is not a small regular file fails fast, with
// a reason naming the path and the problem, never the content; nothing hangs.

const SECRET = 'c2VjcmV0LXZhbHVl'

/** Fails the test if the read takes longer than a generous bound instead of hanging it. */
async function settlesQuickly<T> (promise: Promise<T>, ms = 5000): Promise<T> {
  let timer: NodeJS.Timeout | undefined
  const limit = new Promise<never>((_resolve, reject) => { timer = setTimeout(() => { reject(new Error(`did not settle within ${ms} ms`)) }, ms) })
  try {
    return await Promise.race([promise, limit])
  } finally {
    clearTimeout(timer)
  }
}

t.test('a regular file is read, async and sync', async (t) => {
  const dir = t.testdir({ secret: `${SECRET}\n` })
  t.equal(await readSecretFile(join(dir, 'secret')), `${SECRET}\n`)
  t.equal(readSecretFileSync(join(dir, 'secret')), `${SECRET}\n`)
  t.equal(await readSecretFile(join(dir, 'link')).catch((e: Error) => e.message), `cannot read ${join(dir, 'link')}: no such file (ENOENT)`)
})

t.test('a symbolic link to a regular file is followed (Kubernetes mounts secrets through them)', async (t) => {
  const dir = t.testdir({ '..data': { secret: SECRET }, secret: t.fixture('symlink', '..data/secret') })
  t.equal(await readSecretFile(join(dir, 'secret')), SECRET)
})

const refused: Array<[string, (dir: string) => string, RegExp]> = [
  ['a FIFO (no writer: a plain open would block forever)', (dir) => {
    const path = join(dir, 'fifo')
    execFileSync('mkfifo', [path])
    return path
  }, /: it is a FIFO, not a regular file$/],
  ['a directory', (dir) => dir, /: it is a directory, not a regular file$/],
  ['/dev/zero (endless)', () => '/dev/zero', /^cannot read \/dev\/zero: it is a character device, not a regular file$/],
  ['an oversized file', (dir) => {
    const path = join(dir, 'big')
    writeFileSync(path, SECRET.repeat(Math.ceil((SECRET_FILE_MAX_BYTES + 1) / SECRET.length)))
    return path
  }, new RegExp(`: it is larger than ${SECRET_FILE_MAX_BYTES} bytes$`)]
]

for (const [name, make, reason] of refused) {
  t.test(`refused quickly: ${name}`, async (t) => {
    const path = make(t.testdir({}))
    const err = await settlesQuickly(readSecretFile(path).then(() => undefined, (e: Error) => e))
    t.ok(err instanceof Error, 'async: rejected')
    t.match(err?.message, reason)
    t.match(err?.message, path, 'names the path')
    t.notMatch(err?.message, SECRET, 'never the content')
    const syncErr = t.throws(() => readSecretFileSync(path)) as Error
    t.match(syncErr.message, reason, 'sync: the same reason')
  })
}

t.test('the event loop keeps running while a FIFO path is being read', async (t) => {
  const path = join(t.testdir({}), 'fifo')
  execFileSync('mkfifo', [path])
  let ticks = 0
  const interval = setInterval(() => { ticks += 1 }, 1)
  const reads = await settlesQuickly(Promise.allSettled(Array.from({ length: 20 }, async () => await readSecretFile(path))))
  await new Promise((resolve) => setTimeout(resolve, 20))
  clearInterval(interval)
  t.ok(reads.every((r) => r.status === 'rejected'))
  t.ok(ticks > 0, 'timers ran')
})
