// followHeads (src/upstream/socket-internals.ts) puts functions in two slots of Node's HTTP
// parser. It checks first that the slots are what it was written for: the numbers on
// HTTPParser, Node's own parserOnHeadersComplete in slot 2, nothing of Node's in slot 0. A
// parser that is not (a Node upgrade that renumbers or repurposes them) is left untouched and
// its heads unfollowed: waiting-connections.ts tells of each such connection, and /status counts
// them while the bound still holds the others. The mismatches are simulated on stand-in sockets; the real parser of
// this Node must pass.
import { EventEmitter } from 'node:events'
import { createServer, type Server } from 'node:http'
import type { Socket } from 'node:net'
import t from 'tap'
import { followWaiting } from '../../src/overload/waiting-connections.js'
import { followHeads, headSlotsMismatch } from '../../src/upstream/socket-internals.js'
import { recordingPeer } from '../helpers/raw-http.js'
import { eventually } from '../helpers/eventually.js'

/** Node 24's numbering (lib/_http_common.js takes these from the binding's HTTPParser). */
class HTTPParser {
  static kOnMessageBegin = 0
  static kOnHeadersComplete = 2
}
class Renumbered {
  static kOnMessageBegin = 0
  static kOnHeadersComplete = 3
}
function parserOnHeadersComplete (): void {}
function parserOnHeaders (): void {}
function nodesOwnMessageBegin (): void {}

interface StandIn { socket?: unknown, [slot: number]: unknown }
/** A stand-in socket whose parser is an instance of `Parser` with these slots. */
function socketWith (Parser: new () => object, slots: Record<number, unknown>): Socket & { parser: StandIn } {
  const parser = Object.assign(new Parser(), slots) as StandIn
  const socket = Object.assign(new EventEmitter(), { parser }) as unknown as Socket & { parser: StandIn }
  parser.socket = socket
  return socket
}

const MISMATCHES: Array<{ name: string, socket: () => Socket & { parser: StandIn }, why: RegExp }> = [
  { name: 'slots renumbered', socket: () => socketWith(Renumbered, { 0: null, 2: parserOnHeadersComplete }), why: /kOnHeadersComplete 3, not 0 and 2/ },
  { name: 'no numbering on the class', socket: () => socketWith(class {}, { 0: null, 2: parserOnHeadersComplete }), why: /kOnMessageBegin undefined/ },
  { name: 'slot 2 holds another function', socket: () => socketWith(HTTPParser, { 0: null, 2: parserOnHeaders }), why: /slot 2 holds function parserOnHeaders, not parserOnHeadersComplete/ },
  { name: 'slot 2 empty', socket: () => socketWith(HTTPParser, { 0: null }), why: /slot 2 holds undefined/ },
  { name: 'slot 0 used by Node', socket: () => socketWith(HTTPParser, { 0: nodesOwnMessageBegin, 2: parserOnHeadersComplete }), why: /slot 0 already holds function nodesOwnMessageBegin/ }
]

for (const { name, socket: make, why } of MISMATCHES) {
  t.test(`${name}: the parser is left untouched, the heads unfollowed, and why is said`, async (t) => {
    const socket = make()
    const before = { ...socket.parser }
    t.match(headSlotsMismatch(socket.parser), why)
    let called = 0
    t.match(followHeads(socket, { begun: () => { called++ }, whole: () => { called++ } }), why)
    t.same({ ...socket.parser }, before, 'no slot replaced')
    t.equal(called, 0)
  })
}

t.test('the stand-in as Node 24 makes it: followed', async (t) => {
  const socket = socketWith(HTTPParser, { 0: null, 2: parserOnHeadersComplete })
  t.equal(followHeads(socket, { begun: () => {}, whole: () => {} }), undefined)
  t.not(socket.parser[2], parserOnHeadersComplete, 'slot 2 wrapped')
  t.equal(headSlotsMismatch(socket.parser), undefined, 'the wrapped parser still passes, as it comes back from the pool')
})

t.test('this Node\'s own parser passes the check', async (t) => {
  const server = createServer((_req, res) => { res.end('ok') })
  let mismatch: string | undefined = 'not checked'
  server.on('connection', (socket: Socket) => { mismatch = headSlotsMismatch((socket as unknown as { parser: StandIn }).parser) })
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve))
  t.teardown(() => { server.closeAllConnections(); server.close() })
  const peer = await recordingPeer(t, server, 'GET / HTTP/1.1\r\nHost: x\r\n\r\n')
  await eventually(t, 'answered', () => peer.got().includes('ok'))
  t.equal(mismatch, undefined)
})

t.test('waiting connections on a parser not as expected: each told and counted, none followed, the bound still holds the others', async (t) => {
  const server = new EventEmitter() as unknown as Server
  const told: Array<[string, boolean]> = []
  const waiting = followWaiting(server, { answerHead: () => {}, unfollowed: (why, first) => { told.push([why, first]) } })
  waiting.boundHeads(10, () => {})
  const sockets = Array.from({ length: 3 }, () => socketWith(HTTPParser, { 0: null, 2: parserOnHeaders }))
  for (const socket of sockets) server.emit('connection', socket)
  t.same(told.map(([, first]) => first), [true, false, false], 'each told, the first as such')
  t.match(told[0]?.[0], /slot 2 holds function parserOnHeaders/)
  const followed = socketWith(HTTPParser, { 0: null, 2: parserOnHeadersComplete })
  server.emit('connection', followed)
  ;(followed.parser[0] as () => void).call(followed.parser)
  t.equal(waiting.heads(), 1, 'a head on the followed connection counted')
  t.match(waiting.status(), { maxUnfinishedHeads: 10, unboundedBecause: null, unfollowedConnections: 3, unfollowedBecause: /^the parser's slot 2/, unfinishedHeads: 1 })
  sockets[0]!.emit('close')
  t.equal(waiting.status().unfollowedConnections, 2, 'open ones only')
})

t.test('a head whole that never began: that connection no longer followed, told, the others still', async (t) => {
  const server = new EventEmitter() as unknown as Server
  const told: string[] = []
  const waiting = followWaiting(server, { answerHead: () => {}, unfollowed: (why) => { told.push(why) } })
  waiting.boundHeads(10, () => {})
  const odd = socketWith(HTTPParser, { 0: null, 2: parserOnHeadersComplete })
  const fine = socketWith(HTTPParser, { 0: null, 2: parserOnHeadersComplete })
  server.emit('connection', odd)
  server.emit('connection', fine)
  // Slot 2 called without slot 0: the parser no longer calls them as followHeads expects.
  ;(odd.parser[2] as () => void).call(odd.parser)
  t.match(told, [/a head was whole that never began/])
  ;(odd.parser[0] as () => void).call(odd.parser)
  t.equal(waiting.heads(), 0, 'its heads no longer followed')
  ;(fine.parser[0] as () => void).call(fine.parser)
  t.equal(waiting.heads(), 1, 'the other\'s still')
  t.match(waiting.status(), { maxUnfinishedHeads: 10, unfollowedConnections: 1, unfollowedBecause: /never began/ })
})
