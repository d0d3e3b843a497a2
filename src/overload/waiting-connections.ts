// The proxy listener's unfinished request heads, in the order they began. Admission sees only
// whole heads, yet an unfinished one grows in Node's parser (it copies a growing header value
// at each read: ~38 KiB for a head of 16 KiB), so MAX_CONNECTIONS of them beside an admin-port
// flood outgrow 128 MiB. They are bounded in number (the overload manager derives the bound from
// the memory limit) and closed, oldest first, when private memory nears the limit (manager.ts).
// A head is told at the parser's own boundary, from a message's first byte to its whole head:
// a body still arriving after an early answer is none, a head pipelined behind a request is one.
// One begun behind an exchange under way cannot be answered (the answer would be read as that
// exchange's), so the connection is no longer read until that exchange is answered: such a
// head holds what the read that began it brought, not MAX_HEADER_BYTES, and is counted apart
// from the bound (`heldHeads`) until reading resumes.
// Where Node's parser is not the one this was written for (socket-internals.ts headSlotsMismatch,
// or a head whole that never began), that connection's heads are not followed: neither bounded
// nor closed, told (`unfollowed`) and counted on /status; MAX_CONNECTIONS, admission and the
// memory waters still hold, and the bound still holds the others.
// A closed connection's parser is closed, not left in Node's pool: pooled, it keeps the copies
// of the header values it read in pieces, a closed head's included (unpoolParser).
import type { Server, ServerResponse } from 'node:http'
import type { Socket } from 'node:net'
import { followHeads, httpParserOf, pendingResponse, resumeReading, stopReading, unfollowHeads, unpoolParser } from '../upstream/socket-internals.js'

export interface WaitingConnections {
  /**
   * Answers (`answerHead`) and closes connections holding an unfinished head, oldest head
   * first: up to `count`, leaving `keep` heads at least; returns how many. Idle keep-alives,
   * requests and bodies under way are never closed.
   */
  shedHeads: (count: number, keep?: number) => number
  /** How many connections hold an unfinished head (those held behind an exchange under way not counted). */
  heads: () => number
  /**
   * From then on, a head begun beyond `max` unfinished ones closes the oldest (answered as
   * shedHeads does; `closed` told how many, in the turn after). 0: no bound.
   */
  boundHeads: (max: number, closed: (heads: number) => void) => void
  /** For /status: the bound, the heads now, how many were closed (by the bound or on memory). */
  status: () => HeadsStatus
}

export interface HeadsStatus {
  /** null: unbounded (`unboundedBecause` says why). Followed connections only. */
  maxUnfinishedHeads: number | null
  unboundedBecause: string | null
  /** Open connections whose heads are not followed (neither bounded nor closed on memory), and why the first was not. */
  unfollowedConnections: number
  unfollowedBecause: string | null
  unfinishedHeads: number
  /** Unfinished heads begun behind an exchange under way (beyond readBehind, not read until it is answered): not in unfinishedHeads. */
  heldHeads: number
  closedHeadsTotal: number
}

export interface WaitingOptions {
  /** Writes the answer and ends the socket (it is destroyed once that is flushed). */
  answerHead: (socket: Socket) => void
  /** Told of each connection whose heads cannot be followed, why, and whether it is the first. */
  unfollowed?: (why: string, first: boolean) => void
  /**
   * Heads begun behind an exchange under way that are read on as usual; beyond them, such a
   * connection is not read until the exchange is answered (0, the default: none read on).
   */
  readBehind?: number
}

/** Follows `server`'s connections. Call before gateConnections: the gate hands on only the connections it admits. */
export function followWaiting (server: Server, { answerHead, unfollowed, readBehind = 0 }: WaitingOptions): WaitingConnections {
  /** The sockets holding an unfinished head; a Set iterates in insertion order: the oldest head first. */
  const unfinished = new Set<Socket>()
  let bound = { max: 0, closed: (_heads: number): void => {} }
  let overBound = false
  let closedTotal = 0
  /** Why heads are not followed, once a connection showed it; the open connections not followed. */
  let unfollowedBecause: string | undefined
  const unfollowedOpen = new Set<Socket>()
  const notFollowed = (socket: Socket, why: string): void => {
    unfollowedOpen.add(socket)
    socket.once('close', () => { unfollowedOpen.delete(socket) })
    const first = unfollowedBecause === undefined
    unfollowedBecause ??= why
    unfollowed?.(why, first)
  }
  /** Sockets whose head began and is not yet whole: a whole head that never began means the parser calls its slots otherwise. */
  const inHead = new WeakSet<Socket>()
  const shedHeads = (count: number, keep = 0): number => {
    let shed = 0
    for (const socket of unfinished) {
      if (shed >= count || unfinished.size <= keep) break
      // A head pipelined behind an exchange under way: its request went upstream (an order,
      // say), and a 503 here would be read as that request's answer. Left until it is answered
      // (it was counted once reading resumed, and the next exchange of the same pipeline may
      // have begun since).
      if (pendingResponse(socket) !== null) continue
      unfinished.delete(socket)
      // Node's parser reads the socket from C++ ('data' is never emitted): stopped, no head
      // finished after this answer can reach a route.
      stopReading(socket)
      answerHead(socket)
      socket.destroySoon()
      shed += 1
    }
    closedTotal += shed
    return shed
  }
  // Closed in the next turn, not inside the parser's callback; a burst of heads is closed at once.
  const closeOverBound = (): void => {
    overBound = false
    const shed = shedHeads(unfinished.size - bound.max)
    if (shed > 0) bound.closed(shed)
  }
  const addUnfinished = (socket: Socket): void => {
    unfinished.add(socket)
    if (bound.max > 0 && unfinished.size > bound.max && !overBound) {
      overBound = true
      setImmediate(closeOverBound)
    }
  }
  /**
   * Connections holding a head begun behind an exchange under way, and the response each waits
   * on; `paused`, those not read meanwhile (all beyond `readBehind`). Read on, a head split
   * across reads is whole before Node's header timeout; paused, it holds what the read that
   * began it brought, and the caller's leaving is not seen until reading resumes.
   */
  const held = new Set<Socket>()
  const paused = new Set<Socket>()
  const waitingOn = new WeakMap<Socket, ServerResponse>()
  const release = (socket: Socket): void => {
    if (!held.delete(socket)) return
    if (!socket.destroyed) addUnfinished(socket)
    if (paused.delete(socket)) resumeReading(socket)
  }
  // Once each exchange under way is answered (the next of a pipeline then follows on), reading
  // resumes, and the head, still unfinished, is counted as any other.
  const holdBehind = (socket: Socket): void => {
    const pending = pendingResponse(socket)
    if (pending === null || socket.destroyed) {
      release(socket)
      return
    }
    if (waitingOn.get(socket) === pending) return
    waitingOn.set(socket, pending)
    pending.once('close', () => { if (held.has(socket)) holdBehind(socket) })
  }
  server.on('connection', (socket: Socket) => {
    // After Node's own 'close' listener, which pooled it.
    const parser = httpParserOf(socket)
    socket.once('close', () => { unpoolParser(parser) })
    const mismatch = followHeads(socket, {
      begun: () => {
        inHead.add(socket)
        if (pendingResponse(socket) === null) {
          addUnfinished(socket)
          return
        }
        if (!held.has(socket)) {
          held.add(socket)
          if (held.size - paused.size > readBehind) {
            stopReading(socket)
            paused.add(socket)
          }
        }
        holdBehind(socket)
      },
      whole: () => {
        if (!inHead.delete(socket)) {
          unfollowHeads(socket)
          notFollowed(socket, 'a head was whole that never began: the parser calls its slots otherwise')
          return
        }
        unfinished.delete(socket)
        // Whole in the read that began it: its body, if any, must be read.
        if (held.delete(socket) && paused.delete(socket)) resumeReading(socket)
      }
    })
    if (mismatch === undefined) socket.once('close', () => { unfinished.delete(socket); held.delete(socket); paused.delete(socket) })
    else notFollowed(socket, mismatch)
  })
  return {
    shedHeads,
    heads: () => unfinished.size,
    boundHeads (max, closed) { bound = { max, closed } },
    status: () => {
      const bounded = bound.max > 0
      return {
        maxUnfinishedHeads: bounded ? bound.max : null,
        unboundedBecause: bounded ? null : 'no memory limit known',
        unfollowedConnections: unfollowedOpen.size,
        unfollowedBecause: unfollowedBecause ?? null,
        unfinishedHeads: unfinished.size,
        heldHeads: held.size,
        closedHeadsTotal: closedTotal
      }
    }
  }
}
