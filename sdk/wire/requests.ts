/**
 * Request/reply bookkeeping over any DEALER: request ids, deadlines, and
 * matching `rep` messages (with their payload frames) back to callers.
 * Used by drivers, agents and executors alike.
 */
import { DealerChannel } from "./channel.js";
import { encode, num, type Header } from "./codec.js";
import { ClosedError, TimeoutError } from "../errors/index.js";
import { fromWireError, type WireError } from "./errors.js";

/** A reply: the header's `value` and any payload frames after the header. */
export interface Reply<T = any> {
  value: T;
  frames: Buffer[];
}

/** Anything that can send a request and await its reply. */
export interface Requester {
  request<T = any>(op: string, fields?: Record<string, unknown>, frames?: Array<Buffer | Uint8Array>, timeoutMs?: number | null): Promise<Reply<T>>;
}

interface Pending {
  resolve: (r: Reply) => void;
  reject: (e: Error) => void;
  timer?: NodeJS.Timeout;
}

/** Matches replies to requests sent on one channel. */
export class PendingRequests implements Requester {
  private readonly pending = new Map<number, Pending>();
  private nextRid = 1;
  private closedWith?: Error;

  constructor(
    private readonly channel: DealerChannel,
    private readonly peer: string,
  ) {}

  /** Sends `{t:"req", rid, op, ...fields}` plus payload frames and awaits the reply. */
  request<T = any>(op: string, fields: Record<string, unknown> = {}, frames: Array<Buffer | Uint8Array> = [], timeoutMs: number | null = 30_000): Promise<Reply<T>> {
    if (this.closedWith) return Promise.reject(this.closedWith);
    const rid = this.nextRid++;
    return new Promise<Reply<T>>((resolve, reject) => {
      const p: Pending = { resolve: resolve as (r: Reply) => void, reject };
      if (timeoutMs !== null) {
        p.timer = setTimeout(() => {
          this.pending.delete(rid);
          reject(new TimeoutError(`${this.peer} did not answer '${op}' within ${timeoutMs / 1000} s`, { op }));
        }, timeoutMs);
      }
      this.pending.set(rid, p);
      this.channel.send([encode({ ...fields, t: "req", rid, op }), ...frames]);
    });
  }

  /** Delivers a `rep` message; returns false when no request was waiting for it. */
  deliver(h: Header, frames: Buffer[]): boolean {
    const rid = num(h, "rid");
    const p = this.pending.get(rid);
    if (!p) return false;
    this.pending.delete(rid);
    clearTimeout(p.timer);
    if (h.ok === true) p.resolve({ value: h.value, frames: frames.slice(1) });
    else p.reject(fromWireError(h.error as WireError));
    return true;
  }

  /** Requests waiting for a reply. */
  get size(): number {
    return this.pending.size;
  }

  /** Fails every waiting request (and later ones) with `err`. */
  failAll(err: Error, closeForGood = false): void {
    for (const p of this.pending.values()) {
      clearTimeout(p.timer);
      p.reject(err);
    }
    this.pending.clear();
    if (closeForGood) this.closedWith = err instanceof ClosedError ? err : new ClosedError(err.message, { cause: err });
  }
}
