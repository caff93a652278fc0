/**
 * The server half of the signed hello, in front of a ROUTER (the head, an
 * agent's cache socket). A connection is nobody until it proves a credential:
 *
 *   peer → `[AUTH_MARK, {t:"auth-start"}]`       (or any message: it waits, see below)
 *   head → `[AUTH_MARK, {t:"challenge", nonce}]`  (32 random bytes, one per connection attempt)
 *   peer → `[AUTH_MARK, {t:"auth", role, id, app, mac}]`
 *          mac = HMAC-SHA256(key(role, id, app), "hearth-auth-v1" ‖ role ‖ id ‖ app ‖ nonce ‖ routing id)
 *   head → `[AUTH_MARK, {t:"auth-ok"}]` or `[AUTH_MARK, {t:"auth-failed", error}]`
 *
 * From then on the routing id is bound to that role and identity; messages
 * are dispatched by the binding, never by what the routing id looks like.
 * Binding to the routing id is sound because ROUTERs run without handover (a
 * second connection with a live routing id is refused by ZeroMQ) and peers
 * pick random routing ids (a dropped peer's id cannot be guessed and reused).
 *
 * A message from an unbound peer is held (bounded) and answered with a
 * challenge; once the peer proves itself the held messages are delivered in
 * order. That makes re-authentication transparent when a peer reconnects to
 * a restarted head with messages already in flight. Nothing else is ever
 * sent to an unbound peer: not a status, not an error naming anything.
 */
import { randomBytes, timingSafeEqual } from "node:crypto";
import { authMac, type Role } from "./auth.js";
import { decode, encode, type Frames } from "./codec.js";
import { toWireError, AuthError, ProtocolError } from "./errors.js";

/** First frame of every handshake message; a msgpack header never starts with a 0 byte. */
export const AUTH_MARK = Buffer.from("\0hearth-auth");

/** True when a message is a handshake message (cheap: checked on every message). */
export function isAuthMessage(frames: Buffer[]): boolean {
  const f = frames[0];
  return f !== undefined && f.length === AUTH_MARK.length && f[0] === 0 && f.equals(AUTH_MARK) && frames.length === 2;
}

/** A proven peer. */
export interface Peer {
  role: Role;
  id: string;
  app: string;
  routingId: Buffer;
  /** Last message seen (bindings idle for long are dropped; the peer re-proves itself transparently). */
  lastSeen: number;
}

/** Settings of an authenticator. */
export interface AuthenticatorOptions {
  /** The key a peer claiming (role, id, app) must prove, or a reason it may not join here. */
  keyFor(role: Role, id: string, app: string): Buffer | string;
  /** Sends frames to a routing id (the ROUTER's sendTo). */
  send(routingId: Buffer, frames: Frames): void;
  /** Delivers an authenticated peer's message. */
  deliver(peer: Peer, frames: Buffer[]): void;
  /** Called once a peer proved itself. */
  onBound?(peer: Peer): void;
  /**
   * Asked before a proven peer is bound: a reason to refuse it (a limit, named with the
   * flag that raises it), or undefined to admit it. `bound` holds the current bindings;
   * it may drop stale ones from it (their peers re-prove themselves on their next message).
   */
  admit?(candidate: Peer, bound: Map<string, Peer>): string | undefined;
  /** Overrides of AUTH_LIMITS (the head's `--max-unproven` sets waitingPeers). */
  limits?: Partial<AuthLimits>;
  log(line: string): void;
  /** What this server is, in log lines ("head", "agent cache"). */
  name: string;
}

interface Waiting {
  nonce: Buffer;
  since: number;
  held: Buffer[][];
  bytes: number;
}

/** Bounds on peers that have not proven a credential yet, and on idle bindings. */
export interface AuthLimits {
  /** Messages held per unproven peer. */
  heldMessages: number;
  /** Bytes held per unproven peer. */
  heldBytes: number;
  /** Bytes held for all unproven peers together (without it, waitingPeers × heldBytes could be held). */
  heldBytesTotal: number;
  /** Unproven peers at once; a new one beyond this drops the oldest. */
  waitingPeers: number;
  /** How long an unproven peer may take to prove itself. */
  waitMs: number;
  /** A binding idle this long is dropped (the peer re-proves itself transparently). */
  idleBindingMs: number;
}

/** The defaults of AuthLimits. */
export const AUTH_LIMITS: AuthLimits = {
  heldMessages: 256,
  heldBytes: 128 * 1024 * 1024,
  heldBytesTotal: 256 * 1024 * 1024,
  waitingPeers: 1024,
  waitMs: 30_000,
  idleBindingMs: 30 * 60_000,
};

const ID = /^[\x21-\x7e]{1,256}$/;
const ROLES = new Set<Role>(["admin", "driver", "agent", "executor"]);

/** Binds routing ids to proven credentials; see the module comment for the handshake. */
export class Authenticator {
  private readonly peers = new Map<string, Peer>();
  private readonly waiting = new Map<string, Waiting>();
  /** Refused handshakes and messages dropped unproven (tests and status read these). */
  readonly stats = { refused: 0, dropped: 0, bound: 0 };
  private readonly limits: AuthLimits;
  /** Bytes held for all unproven peers now. */
  private heldTotal = 0;

  constructor(private readonly opts: AuthenticatorOptions) {
    this.limits = { ...AUTH_LIMITS, ...opts.limits };
  }

  /** Handles one message from the ROUTER. */
  receive(routingId: Buffer, frames: Buffer[]): void {
    const key = routingId.toString("latin1");
    const peer = this.peers.get(key);
    if (peer && !isAuthMessage(frames)) {
      peer.lastSeen = Date.now();
      this.opts.deliver(peer, frames);
      return;
    }
    if (isAuthMessage(frames)) return this.onHandshake(key, routingId, frames[1]!);
    this.hold(key, routingId, frames);
  }

  /** The proven peer behind a routing id, if any. */
  peer(routingId: Buffer): Peer | undefined {
    return this.peers.get(routingId.toString("latin1"));
  }

  /** Forgets a binding (its peer left for good, e.g. an executor that exited). */
  forget(routingId: Buffer): void {
    this.peers.delete(routingId.toString("latin1"));
  }

  /** Drops unproven peers past the wait and bindings idle for long. */
  sweep(now = Date.now()): void {
    for (const [k, w] of this.waiting) {
      if (now - w.since > this.limits.waitMs) this.unwait(k, true);
    }
    for (const [k, p] of this.peers) if (now - p.lastSeen > this.limits.idleBindingMs) this.peers.delete(k);
  }

  private challenge(key: string, routingId: Buffer): Waiting {
    let w = this.waiting.get(key);
    if (w) return w;
    if (this.waiting.size >= this.limits.waitingPeers) {
      // Oldest first: a flood of unproven connections cannot keep a real peer waiting for long.
      const [oldest] = this.waiting.keys();
      this.unwait(oldest!, true);
    }
    w = { nonce: randomBytes(32), since: Date.now(), held: [], bytes: 0 };
    this.waiting.set(key, w);
    this.opts.send(routingId, [AUTH_MARK, encode({ t: "challenge", nonce: w.nonce })]);
    return w;
  }

  private hold(key: string, routingId: Buffer, frames: Buffer[]): void {
    const w = this.challenge(key, routingId);
    const size = frames.reduce((n, f) => n + f.length, 0);
    if (w.held.length >= this.limits.heldMessages || w.bytes + size > this.limits.heldBytes || this.heldTotal + size > this.limits.heldBytesTotal) {
      this.stats.dropped++;
      return;
    }
    w.held.push(frames);
    w.bytes += size;
    this.heldTotal += size;
  }

  /** Stops waiting for a peer; `dropped` counts its held messages as lost. */
  private unwait(key: string, dropped: boolean): Waiting | undefined {
    const w = this.waiting.get(key);
    if (!w) return undefined;
    if (dropped) this.stats.dropped += w.held.length;
    this.heldTotal -= w.bytes;
    this.waiting.delete(key);
    return w;
  }

  private onHandshake(key: string, routingId: Buffer, body: Buffer): void {
    let m: Record<string, unknown>;
    try {
      const v = decode(body);
      if (v === null || typeof v !== "object") throw new ProtocolError("not a map");
      m = v as Record<string, unknown>;
    } catch {
      return this.refuse(key, routingId, "a malformed handshake message");
    }
    if (m.t === "auth-start") {
      // A fresh start (also from a bound peer that reconnected and wants to be sure): a new nonce.
      this.unwait(key, true);
      this.peers.delete(key);
      this.challenge(key, routingId);
      return;
    }
    if (m.t !== "auth") return this.refuse(key, routingId, `an unknown handshake message '${String(m.t)}'`);
    const w = this.waiting.get(key);
    if (!w) return this.refuse(key, routingId, "an 'auth' without a challenge (send 'auth-start' first)");
    const { role, id, app, mac } = m;
    if (typeof role !== "string" || !ROLES.has(role as Role)) return this.refuse(key, routingId, `an unknown role '${String(role)}'`);
    if (typeof id !== "string" || !ID.test(id)) return this.refuse(key, routingId, "an id that is not 1-256 printable characters");
    if (typeof app !== "string" || (app !== "" && !ID.test(app))) return this.refuse(key, routingId, "an app that is not 1-256 printable characters");
    if (!Buffer.isBuffer(mac) && !(mac instanceof Uint8Array)) return this.refuse(key, routingId, "no mac");
    const expectedKey = this.opts.keyFor(role as Role, id, app);
    if (typeof expectedKey === "string") return this.refuse(key, routingId, expectedKey);
    const expected = authMac(expectedKey, w.nonce, routingId, role, id, app);
    const got = Buffer.from(mac);
    if (got.length !== expected.length || !timingSafeEqual(got, expected)) {
      return this.refuse(key, routingId, `a wrong credential for ${role} '${id}'${app ? ` of app '${app}'` : ""}`);
    }
    const peer: Peer = { role: role as Role, id, app, routingId: Buffer.from(routingId), lastSeen: Date.now() };
    const limit = this.opts.admit?.(peer, this.peers);
    if (limit !== undefined) return this.refuse(key, routingId, limit, "Wait for a connection to close, or raise the limit");
    this.unwait(key, false);
    this.peers.set(key, peer);
    this.stats.bound++;
    this.opts.send(routingId, [AUTH_MARK, encode({ t: "auth-ok" })]);
    this.opts.onBound?.(peer);
    for (const frames of w.held) this.opts.deliver(peer, frames);
  }

  private refuse(key: string, routingId: Buffer, what: string, remedy = "Check the credential (HEARTH_HOME's secret, or the app token)"): void {
    this.stats.refused++;
    this.unwait(key, true);
    this.peers.delete(key);
    this.opts.log(`${this.opts.name}: refused a peer (${printable(routingId)}): ${what}`);
    const error = toWireError(new AuthError(`the ${this.opts.name} refused this connection: ${what}. ${remedy}`));
    this.opts.send(routingId, [AUTH_MARK, encode({ t: "auth-failed", error })]);
  }
}

function printable(id: Buffer): string {
  const s = id.toString();
  return /^[\x20-\x7e]+$/.test(s) ? s.slice(0, 80) : `0x${id.toString("hex").slice(0, 80)}`;
}
