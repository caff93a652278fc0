/**
 * An independent driver for black-box tests: a bare ZeroMQ DEALER that speaks
 * the documented wire protocol (docs/protocol.md) without the SDK, and records
 * every message the head sends back.
 */
import { Dealer } from "zeromq";
import { pack, unpack } from "msgpackr";

/** A message received from the head. */
export interface Received {
  header: any;
  payload?: unknown;
  at: number;
}

/** A raw protocol client that keeps every reply. */
export class RawClient {
  readonly socket: Dealer;
  readonly received: Received[] = [];
  private rid = 1;
  private loop: Promise<void>;

  constructor(endpoint: string, routingId = `d.raw-${process.pid}-${Math.random().toString(36).slice(2)}`) {
    const socket = new Dealer({ routingId, linger: 0 });
    socket.connect(endpoint);
    this.socket = socket;
    this.loop = (async () => {
      try {
        for await (const [h, p] of socket) {
          const header = unpack(h!);
          this.received.push({ header, payload: p ? unpack(p) : undefined, at: Date.now() });
        }
      } catch {
        // socket closed
      }
    })();
  }

  /** Sends raw frames. */
  async sendFrames(frames: Array<Buffer | string>): Promise<void> {
    await this.socket.send(frames);
  }

  /** Sends a request and waits (with a timeout) for its reply. */
  async request(op: string, fields: Record<string, unknown> = {}, timeoutMs = 10_000): Promise<any> {
    const rid = this.rid++;
    await this.socket.send([pack({ ...fields, t: "req", rid, op })]);
    const r = await this.waitFor((m) => m.header.t === "rep" && m.header.rid === rid, timeoutMs);
    if (!r.header.ok) throw new Error(`${r.header.error.name}: ${r.header.error.message}`);
    return r.header.value;
  }

  /** Sends a call with an explicit call id. */
  async call(cid: number, svc: string, method: string, args: unknown[]): Promise<void> {
    await this.socket.send([pack({ t: "call", cid, svc, method }), pack(args)]);
  }

  /** Waits until a received message matches, with a timeout. */
  async waitFor(match: (m: Received) => boolean, timeoutMs = 10_000): Promise<Received> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const m = this.received.find(match);
      if (m) return m;
      if (Date.now() > deadline) throw new Error(`no matching message from the head within ${timeoutMs} ms`);
      await new Promise((r) => setTimeout(r, 10));
    }
  }

  /** Answers to one call id (result or failed). */
  answersTo(cid: number): Received[] {
    return this.received.filter((m) => (m.header.t === "result" || m.header.t === "failed") && m.header.cid === cid);
  }

  async close(): Promise<void> {
    this.socket.close();
    await this.loop;
  }
}
