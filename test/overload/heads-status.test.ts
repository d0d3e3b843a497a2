// What an operator sees of the bound on unfinished request heads: the start log gives the bound,
// or says "unbounded" and why (never a bare 0); /status gives the bound, the heads unfinished
// now and how many were closed since start, on a real sidecar with real slow heads.
import t from 'tap'
import { request } from 'undici'
import type { HeadsStatus } from '../../src/overload/waiting-connections.js'
import { headCost, headsBound, KEPT_HEADS } from '../../src/overload/waters.js'
import { startSidecar } from '../helpers/build.js'
import { eventually } from '../helpers/eventually.js'
import { recordingPeer, type RecordingPeer } from '../helpers/raw-http.js'
import { startUpstream } from '../helpers/upstream.js'

const MiB = 1024 * 1024
/** So small a limit that the bound is its floor: the 64 heads kept. */
const SMALL_LIMIT = 48 * MiB

const headsOf = async (adminUrl: string): Promise<HeadsStatus | undefined> =>
  (await (await request(adminUrl + '/status')).body.json() as { overload: { heads?: HeadsStatus } }).overload.heads

t.test('no memory limit: the start log and /status say the heads are unbounded, and why', async (t) => {
  const upstream = await startUpstream(t)
  const { adminUrl, logs } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: '0' })
  const line = logs.entries().find((e) => typeof e.msg === 'string' && e.msg.startsWith('no memory limit known'))
  t.equal(line?.maxUnfinishedHeads, 'unbounded: no memory limit known', 'not 0')
  t.same(await headsOf(adminUrl), { maxUnfinishedHeads: null, unboundedBecause: 'no memory limit known', unfollowedConnections: 0, unfollowedBecause: null, unfinishedHeads: 0, heldHeads: 0, closedHeadsTotal: 0 })
})

t.test('/status: the bound, the unfinished heads now, and those closed since start', async (t) => {
  const upstream = await startUpstream(t)
  const { app, adminUrl, logs } = await startSidecar(t, upstream.url, { MEMORY_LIMIT_BYTES: String(SMALL_LIMIT) })
  const bound = headsBound(SMALL_LIMIT, headCost(16 * 1024, 100))
  t.equal(bound, KEPT_HEADS)
  t.equal(logs.entries().find((e) => e.msg === 'memory limit known: new requests are shed before it')?.maxUnfinishedHeads, bound)
  t.same(await headsOf(adminUrl), { maxUnfinishedHeads: bound, unboundedBecause: null, unfollowedConnections: 0, unfollowedBecause: null, unfinishedHeads: 0, heldHeads: 0, closedHeadsTotal: 0 })
  const port = (app.proxy.server.address() as { port: number }).port
  const heads: RecordingPeer[] = []
  for (let i = 0; i < bound + 3; i++) heads.push(await recordingPeer(t, port, `GET /v2/store/h${i} HTTP/1.1\r\nHost: x\r\n`))
  await eventually(t, 'three closed', () => heads.filter((h) => h.closed()).length === 3)
  await eventually(t, '/status counts them', async () => (await headsOf(adminUrl))?.closedHeadsTotal === 3)
  t.same(await headsOf(adminUrl), { maxUnfinishedHeads: bound, unboundedBecause: null, unfollowedConnections: 0, unfollowedBecause: null, unfinishedHeads: bound, heldHeads: 0, closedHeadsTotal: 3 })
})
