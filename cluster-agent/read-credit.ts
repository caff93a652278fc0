/**
 * Flow control for object data sent to a connection. Every socket sends with
 * no high-water mark (a full pipe would drop messages), so bytes a peer does
 * not read pile up in ZeroMQ's pipe for it, without bound: a driver that asks
 * for chunks and never reads them could fill the head's memory. So each reply
 * that carries object data gets a token (`ack` in its value) that only a
 * peer that read the reply knows; the peer hands it back (`acks` on a later
 * `obj-*` request, or `obj-ack`, on any of its connections), and a connection may hold at most
 * `limit` bytes of data whose tokens have not come back. Past that its next
 * data reply waits (it is not refused: a reader that is merely slow gets its
 * data once it catches up) until tokens return, and fails with
 * BackpressureError after `waitMs`. A waiting reply holds only references to
 * the store's buffers, not copies. Tokens are random, so a peer cannot
 * acknowledge what it did not read.
 */
import { randomInt } from "node:crypto";
import { BackpressureError } from "../sdk/errors/index.js";
import { formatBytes } from "../sdk/format.js";

/** The limits of ReadCredit. */
export interface ReadCreditLimits {
  /** Unacknowledged object bytes one connection may hold. */
  limit: number;
  /** How long a data reply may wait for its connection to catch up. */
  waitMs: number;
  /** Data replies that may wait at once on one connection (more fail at once). */
  waiting: number;
  /** A connection silent this long is forgotten (its peer is gone; ZeroMQ dropped its pipe). */
  idleMs: number;
}

/** The defaults of ReadCreditLimits. */
export const READ_CREDIT: ReadCreditLimits = { limit: 256 * 1024 * 1024, waitMs: 60_000, waiting: 1024, idleMs: 30 * 60_000 };

interface Waiter {
  bytes: number;
  resolve: (token: number) => void;
  reject: (e: Error) => void;
  timer: NodeJS.Timeout;
}

interface Connection {
  unread: number;
  /** Tokens of this connection's unacknowledged replies. */
  tokens: Set<number>;
  waiters: Waiter[];
  lastSeen: number;
}

/** Per-connection accounting of object data sent and not yet acknowledged. */
export class ReadCredit {
  private readonly conns = new Map<string, Connection>();
  /**
   * Every unacknowledged token, whichever connection it was sent on: a peer
   * with two connections (an agent's control and bulk sockets) may hand a
   * token back on either; holding it is the proof of having read the reply.
   */
  private readonly tokens = new Map<number, { conn: Connection; bytes: number }>();
  private readonly limits: ReadCreditLimits;
  /** Replies that had to wait, and those that failed waiting (status and tests read these). */
  readonly stats = { waited: 0, refused: 0 };

  constructor(limits: Partial<ReadCreditLimits> = {}) {
    this.limits = { ...READ_CREDIT, ...limits };
  }

  /** Unacknowledged bytes of `conn` now. */
  unread(conn: string): number {
    return this.conns.get(conn)?.unread ?? 0;
  }

  /** Takes back the tokens a peer returned (unknown ones are ignored: a token counts once), and lets waiting replies go. */
  acknowledge(conn: string, acks: unknown): void {
    const from = this.conns.get(conn);
    if (from) from.lastSeen = Date.now();
    if (!Array.isArray(acks)) return;
    const freed = new Set<Connection>();
    for (const t of acks.slice(0, 4096)) {
      const entry = typeof t === "number" ? this.tokens.get(t) : undefined;
      if (!entry) continue;
      this.tokens.delete(t as number);
      entry.conn.tokens.delete(t as number);
      entry.conn.unread -= entry.bytes;
      freed.add(entry.conn);
    }
    for (const c of freed) this.release(c);
  }

  /**
   * Resolves with the token of a reply of `bytes` to `conn` once the
   * connection may be sent it: at once within its limit, else when enough
   * tokens came back (in arrival order). Fails with BackpressureError after
   * `waitMs`, or at once when `waiting` replies already wait.
   */
  admit(conn: string, bytes: number): Promise<number> {
    const c = this.connection(conn);
    if (c.waiters.length === 0 && this.fits(c, bytes)) return Promise.resolve(this.record(c, bytes));
    if (c.waiters.length >= this.limits.waiting) {
      this.stats.refused++;
      return Promise.reject(this.behind(c, `${c.waiters.length} more replies already wait`));
    }
    this.stats.waited++;
    return new Promise<number>((resolve, reject) => {
      const w: Waiter = {
        bytes,
        resolve,
        reject,
        timer: setTimeout(() => {
          c.waiters = c.waiters.filter((x) => x !== w);
          this.stats.refused++;
          reject(this.behind(c, `its reply waited ${this.limits.waitMs / 1000} s`));
          this.release(c);
        }, this.limits.waitMs),
      };
      c.waiters.push(w);
    });
  }

  /** Forgets connections silent past `idleMs` (their peers are gone). */
  expire(now = Date.now()): void {
    for (const [k, c] of this.conns) {
      if (c.waiters.length > 0 || now - c.lastSeen <= this.limits.idleMs) continue;
      for (const t of c.tokens) this.tokens.delete(t);
      this.conns.delete(k);
    }
  }

  private connection(conn: string): Connection {
    let c = this.conns.get(conn);
    if (!c) {
      c = { unread: 0, tokens: new Set(), waiters: [], lastSeen: Date.now() };
      this.conns.set(conn, c);
    }
    c.lastSeen = Date.now();
    return c;
  }

  /** Within the limit; a connection holding nothing unread may always take one reply, however large, so progress never stops. */
  private fits(c: Connection, bytes: number): boolean {
    return c.unread === 0 || c.unread + bytes <= this.limits.limit;
  }

  private record(c: Connection, bytes: number): number {
    let token = randomInt(1, 2 ** 48);
    while (this.tokens.has(token)) token = randomInt(1, 2 ** 48);
    this.tokens.set(token, { conn: c, bytes });
    c.tokens.add(token);
    c.unread += bytes;
    return token;
  }

  /** Lets waiting replies go, in order, while they fit. */
  private release(c: Connection): void {
    while (c.waiters.length > 0 && this.fits(c, c.waiters[0]!.bytes)) {
      const w = c.waiters.shift()!;
      clearTimeout(w.timer);
      w.resolve(this.record(c, w.bytes));
    }
  }

  private behind(c: Connection, why: string): BackpressureError {
    return new BackpressureError(
      `this connection has ${formatBytes(c.unread)} of object data it has not acknowledged reading (limit ${formatBytes(this.limits.limit)}), and ${why}. ` +
        `Read the replies already sent (the SDK acknowledges them as it reads), then request more`,
      { unread: c.unread, limit: this.limits.limit },
    );
  }
}
