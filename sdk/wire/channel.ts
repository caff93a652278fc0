/**
 * Socket wrappers that every process uses. zeromq.js allows one pending send
 * per socket, so each wrapper owns an ordered outbox drained by a single
 * pump; receiving is an async loop that hands each message to a handler and
 * never lets a handler error escape (a bad frame must not kill a process).
 */
import { Dealer, Router } from "zeromq";
import type { CurveClientKeys } from "./curve.js";

/** Frames of one outgoing message. */
export type Frames = Array<Buffer | Uint8Array | string>;

/** Serialises sends on one socket; `push` never blocks the caller. */
class Outbox {
  private queue: Frames[] = [];
  private pumping = false;
  private closed = false;

  constructor(
    private readonly socket: Dealer | Router,
    private readonly onError: (err: unknown) => void,
  ) {}

  push(frames: Frames): void {
    if (this.closed) return;
    this.queue.push(frames);
    if (!this.pumping) void this.pump();
  }

  /** Resolves once everything queued so far has been handed to ZeroMQ. */
  async drain(): Promise<void> {
    while (this.queue.length > 0 || this.pumping) await new Promise((r) => setTimeout(r, 1));
  }

  close(): void {
    this.closed = true;
    this.queue = [];
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      while (this.queue.length > 0 && !this.closed) {
        const next = this.queue.shift()!;
        try {
          await this.socket.send(next);
        } catch (err) {
          if (!this.closed) this.onError(err);
        }
      }
    } finally {
      this.pumping = false;
    }
  }
}

/** Options shared by both wrappers. */
export interface ChannelOptions {
  /** Called for errors inside the receive loop or handler; defaults to stderr. */
  onError?: (err: unknown) => void;
  /** Largest frame ZeroMQ accepts from a peer before dropping the connection. */
  maxMessageSize?: number;
  /** DEALER: connect as a CURVE client with these keys (see curve.ts). */
  curveClient?: CurveClientKeys;
  /** ROUTER: be a CURVE server with this secret key (pair it with a ZAP handler to choose who may connect). */
  curveServerSecretKey?: string;
}

const defaultOnError = (err: unknown): void => {
  console.error(`[hearth] ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
};

/** A DEALER connected to one ROUTER (the head), identified by a routing id. */
export class DealerChannel {
  private readonly socket: Dealer;
  private readonly outbox: Outbox;
  private readonly onError: (err: unknown) => void;
  private closed = false;

  constructor(routingId: string, opts: ChannelOptions = {}) {
    this.onError = opts.onError ?? defaultOnError;
    const curve = opts.curveClient
      ? { curveServerKey: opts.curveClient.serverPublicKey, curvePublicKey: opts.curveClient.publicKey, curveSecretKey: opts.curveClient.secretKey }
      : {};
    this.socket = new Dealer({ routingId, linger: 200, sendHighWaterMark: 0, receiveHighWaterMark: 0, ...curve });
    if (opts.maxMessageSize) this.socket.maxMessageSize = opts.maxMessageSize;
    this.outbox = new Outbox(this.socket, this.onError);
  }

  connect(endpoint: string): void {
    this.socket.connect(endpoint);
  }

  send(frames: Frames): void {
    this.outbox.push(frames);
  }

  /** Runs `handler` for every received message until `close()`. */
  async serve(handler: (frames: Buffer[]) => void | Promise<void>): Promise<void> {
    try {
      for await (const frames of this.socket) {
        try {
          await handler(frames);
        } catch (err) {
          this.onError(err);
        }
      }
    } catch (err) {
      if (!this.closed) this.onError(err);
    }
  }

  async flush(): Promise<void> {
    await this.outbox.drain();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.outbox.close();
    this.socket.close();
  }
}

/** A ROUTER bound to an endpoint; messages arrive with the sender's routing id first. */
export class RouterChannel {
  private readonly socket: Router;
  private readonly outbox: Outbox;
  private readonly onError: (err: unknown) => void;
  private closed = false;

  constructor(opts: ChannelOptions = {}) {
    this.onError = opts.onError ?? defaultOnError;
    const curve = opts.curveServerSecretKey ? { curveServer: true, curveSecretKey: opts.curveServerSecretKey } : {};
    this.socket = new Router({ handover: true, linger: 200, sendHighWaterMark: 0, receiveHighWaterMark: 0, ...curve });
    if (opts.maxMessageSize) this.socket.maxMessageSize = opts.maxMessageSize;
    this.outbox = new Outbox(this.socket, this.onError);
  }

  /** Binds and returns the concrete endpoint (port 0 / `*` resolved). */
  async bind(endpoint: string): Promise<string> {
    await this.socket.bind(endpoint.replace(/:0$/, ":*"));
    return this.socket.lastEndpoint ?? endpoint;
  }

  sendTo(routingId: Buffer | string, frames: Frames): void {
    this.outbox.push([routingId, ...frames]);
  }

  async serve(handler: (routingId: Buffer, frames: Buffer[]) => void | Promise<void>): Promise<void> {
    try {
      for await (const [id, ...frames] of this.socket) {
        try {
          await handler(id!, frames);
        } catch (err) {
          this.onError(err);
        }
      }
    } catch (err) {
      if (!this.closed) this.onError(err);
    }
  }

  async flush(): Promise<void> {
    await this.outbox.drain();
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.outbox.close();
    this.socket.close();
  }
}
