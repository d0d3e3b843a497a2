// followHeads (src/upstream/socket-internals.ts) puts functions in two slots of Node's HTTP
// parser. It checks first that the slots are what it was written for: the numbers on
// HTTPParser, Node's own parserOnHeadersComplete in slot 2, nothing of Node's in slot 0. A
// parser that is not (a Node upgrade that renumbers or repurposes them) is left untouched and
// its heads unfollowed: waiting-connections.ts then says so once, and /status says why the
// heads are unbounded. The mismatches are simulated on stand-in sockets; the real parser of
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

t.test('waiting connections on a parser not as expected: said once, none followed, /status says why they are unbounded', async (t) => {
  const server = new EventEmitter() as unknown as Server
  const told: string[] = []
  const waiting = followWaiting(server, { answerHead: () => {}, unfollowed: (why) => { told.push(why) } })
  waiting.boundHeads(10, () => {})
  for (let i = 0; i < 3; i++) server.emit('connection', socketWith(HTTPParser, { 0: null, 2: parserOnHeaders }))
  t.equal(told.length, 1, 'said once')
  t.match(told[0], /slot 2 holds function parserOnHeaders/)
  t.equal(waiting.heads(), 0)
  t.match(waiting.status(), { maxUnfinishedHeads: null, unboundedBecause: /^not followed: the parser's slot 2/, unfinishedHeads: 0, closedHeadsTotal: 0 })
})
