// The key store of one sidecar: expiry on a fake clock, the journal in STATE_DIR, and the
// draft's judgements of a held key.
import { appendFileSync, mkdirSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import t from 'tap'
import { judge, entryFromJson, entryToJson, type Pending } from '../../src/idempotency/entries.js'
import { createMemoryStore, JOURNAL_FILE, SWEEP_MS } from '../../src/idempotency/memory-store.js'
import { fakeClock } from '../helpers/fake-clock.js'
import { tempDir } from '../helpers/temp-dir.js'

const HOUR = 3_600_000
const pending = (now: number, owner = 'me', lifetimeMs = HOUR): Pending =>
  ({ state: 'pending', fingerprint: 'fp', owner, deadline: now + 1000, expiresAt: now + lifetimeMs })
const answer = { statusCode: 201, headers: { 'content-type': 'application/json', 'set-cookie': ['a', 'b'] }, body: Buffer.from([0, 1, 2, 255]) }

t.test('expiry: a key is forgotten when its lifetime has passed, not before', async (t) => {
  const { clock, tick } = fakeClock()
  const store = createMemoryStore({ clock })
  await store.start()
  t.same(await store.take('k', pending(clock.wallNow())), { kind: 'taken' })
  t.equal(await store.settle('k', 'me', { state: 'done', fingerprint: 'fp', answer, expiresAt: clock.wallNow() + HOUR }), true)
  await tick(HOUR - 1)
  t.equal((await store.take('k', pending(clock.wallNow()))).kind, 'held')
  await tick(1)
  t.same(await store.take('k', pending(clock.wallNow())), { kind: 'taken' }, 'taken anew once expired')
  t.same(store.counts(), { pending: 1, done: 0, unknown: 0 })
  // The sweep drops expired keys nobody asks for again.
  await store.take('other', pending(clock.wallNow(), 'me', 10))
  await tick(SWEEP_MS)
  await store.take('third', pending(clock.wallNow()))
  t.equal(store.entries().has('other'), false)
  t.equal(store.entries().has('k'), true)
  await store.close()
})

t.test('settle and release: only a pending key of its owner; an operator releases any', async (t) => {
  const { clock } = fakeClock()
  const store = createMemoryStore({ clock })
  await store.take('k', pending(clock.wallNow()))
  t.equal(await store.settle('k', 'someone else', { state: 'unknown', fingerprint: 'fp', expiresAt: clock.wallNow() + HOUR }), false)
  t.equal(await store.release('k', 'someone else'), false)
  t.equal(await store.settle('nothing', 'me', { state: 'unknown', fingerprint: 'fp', expiresAt: 1 }), false)
  t.equal(await store.settle('k', 'me', { state: 'unknown', fingerprint: 'fp', expiresAt: clock.wallNow() + HOUR }), true)
  t.equal(await store.settle('k', 'me', { state: 'unknown', fingerprint: 'fp', expiresAt: clock.wallNow() + HOUR }), false, 'settled once')
  t.equal(await store.release('k', 'me'), false, 'an unknown key is not released by its owner')
  t.same(store.counts(), { pending: 0, done: 0, unknown: 1 })
  t.equal(await store.release('k'), true, 'an operator releases it')
  t.equal(await store.release('k'), false)
  t.equal(store.backend, 'memory')
})

t.test('the journal: keys outlive a restart, a pending one as unknown; a torn last line is ignored', async (t) => {
  const { clock, tick } = fakeClock()
  const dir = join(tempDir('keys-'), 'idempotency')
  const one = createMemoryStore({ clock, dir })
  t.equal(one.backend, 'state-dir')
  await one.start()
  await one.take('done', pending(clock.wallNow()))
  await one.settle('done', 'me', { state: 'done', fingerprint: 'fp', answer, expiresAt: clock.wallNow() + HOUR })
  await one.take('pending', pending(clock.wallNow()))
  await one.take('released', pending(clock.wallNow()))
  await one.release('released', 'me')
  await one.take('short', pending(clock.wallNow(), 'me', 10))
  appendFileSync(join(dir, JOURNAL_FILE), '{"id":"torn","entry":{"sta')
  appendFileSync(join(dir, JOURNAL_FILE), '\n{"entry":null}\n{"id":"bad","entry":{"state":"weird","fingerprint":"x","expiresAt":1}}\n')
  await tick(10)
  const two = createMemoryStore({ clock, dir })
  await two.start()
  const entries = two.entries()
  t.same([...entries.keys()].sort(), ['done', 'pending'])
  t.equal(entries.get('pending')?.state, 'unknown', 'its process ended while it was out')
  const done = entries.get('done')
  t.same(done?.state === 'done' ? done.answer : undefined, answer, 'the answer byte for byte')
  t.equal(readFileSync(join(dir, JOURNAL_FILE), 'utf8').trim().split('\n').length, 2, 'compacted at start')
  await one.close()
  await two.close()
})

t.test('a journal that cannot be read fails the start: the sidecar never runs without its keys', async (t) => {
  const { clock } = fakeClock()
  const dir = join(tempDir('keys-'), 'idempotency')
  mkdirSync(join(dir, JOURNAL_FILE), { recursive: true })
  await t.rejects(createMemoryStore({ clock, dir }).start(), { code: 'EISDIR' })
})

t.test('judge: the draft\'s answers to a held key', async (t) => {
  const fp = 'fp'
  t.same(judge({ state: 'done', fingerprint: fp, answer, expiresAt: 10 }, 'other', 0), { kind: 'mismatch' })
  t.same(judge({ state: 'done', fingerprint: fp, answer, expiresAt: 10 }, fp, 0), { kind: 'replay', answer })
  t.same(judge({ state: 'unknown', fingerprint: fp, expiresAt: 10 }, fp, 0), { kind: 'unknown' })
  t.same(judge({ state: 'pending', fingerprint: fp, owner: 'o', deadline: 100, expiresAt: 1000 }, fp, 40), { kind: 'in-flight', retryAfterMs: 60 })
  t.same(judge({ state: 'pending', fingerprint: fp, owner: 'o', deadline: 100, expiresAt: 1000 }, fp, 100), { kind: 'unknown' }, 'past its deadline its sidecar is gone')
})

t.test('entries as JSON and back; anything else is no entry', async (t) => {
  for (const entry of [
    { state: 'done' as const, fingerprint: 'f', answer, expiresAt: 5 },
    { state: 'unknown' as const, fingerprint: 'f', expiresAt: 5 },
    { state: 'pending' as const, fingerprint: 'f', owner: 'o', deadline: 1, expiresAt: 5 }
  ]) t.same(entryFromJson(JSON.parse(JSON.stringify(entryToJson(entry)))), entry, entry.state)
  for (const bad of [null, 1, {}, { fingerprint: 'f', expiresAt: 1 }, { state: 'pending', fingerprint: 'f', expiresAt: 1 },
    { state: 'done', fingerprint: 'f', expiresAt: 1, answer: { statusCode: 200, headers: null, body: '' } },
    { state: 'done', fingerprint: 'f', expiresAt: 1 }, { state: 'unknown', fingerprint: 1, expiresAt: 1 }]) {
    t.equal(entryFromJson(bad), undefined, JSON.stringify(bad))
  }
})
