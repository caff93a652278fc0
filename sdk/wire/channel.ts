/**
 * Socket wrappers that every process uses. zeromq.js allows one pending send
 * per socket, so each wrapper owns an ordered outbox drained by a single
 * pump; receiving is an async loop that hands each message to a handler and
 * never lets a handler error escape (a bad frame must not kill a process).
 */
import { Dealer, Router } from "zeromq";
import type { CurveClientKeys } from "./curve.js";
import { authMac, type Credential } from "./auth.js";
import { gateCredentials } from "./zap.js";
import { AUTH_MARK, isAuthMessage } from "./authenticator.js";
import { decode, encode } from "./codec.js";
import { AuthError, MessageTooLargeError, fromWireError, type WireError } from "./errors.js";
import { formatBytes } from "../format.js";

import type { Frames } from "./codec.js";
export type { Frames } from "./codec.js";

/** Serialises sends on one socket; `push` never blocks the caller. */
class Outbox {
  private queue: Frames[] = [];
  /** Handshake messages: sent first, even while the outbox is held. */
  private urgent: Frames[] = [];
  private pumping = false;
  private closed = false;
  /** While true only urgent messages go out (a DEALER that has not proven its credential yet). */
  held = false;

  constructor(
    private readonly socket: Dealer | Router,
    private readonly onError: (err: unknown) => void,
  ) {}

  push(frames: Frames): void {
    if (this.closed) return;
    this.queue.push(frames);
    if (!this.pumping && !this.held) void this.pump();
  }

  /** Queues a handshake message ahead of everything, held or not. */
  pushUrgent(frames: Frames): void {
    if (this.closed) return;
    this.urgent.push(frames);
    if (!this.pumping) void this.pump();
  }

  /** Lets held messages go. */
  release(): void {
    this.held = false;
    if (!this.pumping) void this.pump();
  }

  /** Resolves once everything that can go has been handed to ZeroMQ (held messages of an unproven peer cannot). */
  async drain(): Promise<void> {
    while (this.urgent.length > 0 || this.pumping || (this.queue.length > 0 && !this.held)) await new Promise((r) => setTimeout(r, 1));
  }

  close(): void {
    this.closed = true;
    this.queue = [];
  }

  private async pump(): Promise<void> {
    this.pumping = true;
    try {
      while ((this.urgent.length > 0 || (this.queue.length > 0 && !this.held)) && !this.closed) {
        const next = this.urgent.length > 0 ? this.urgent.shift()! : this.queue.shift()!;
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

/**
 * What a server socket (ROUTER) accepts in one message. Every message a peer
 * sends a server is a header frame plus at most one payload frame (docs/protocol.md);
 * the largest is an 8 MiB upload chunk. ZeroMQ's maxMessageSize bounds each
 * frame before it is buffered; these bound the whole message once ZeroMQ has
 * handed it over, before anything decodes, holds or forwards it.
 */
export const MESSAGE_BOUNDS = {
  /** Header plus payload frames. */
  maxFrames: 4,
  /** Sum of all frames' sizes. */
  maxTotalBytes: 16 * 1024 * 1024,
};

/** Why a message breaks MESSAGE_BOUNDS-style limits, or undefined when it does not. */
export function checkMessageBounds(frames: Buffer[], bounds: { maxFrames: number; maxTotalBytes: number }): MessageTooLargeError | undefined {
  let total = 0;
  for (const f of frames) total += f.length;
  if (frames.length > bounds.maxFrames) {
    const e = new MessageTooLargeError(total, bounds.maxTotalBytes, "message");
    e.message = `a message of ${frames.length} frames was refused: at most ${bounds.maxFrames} frames (a header and its payload) are accepted; nothing of it was processed`;
    return e;
  }
  if (total > bounds.maxTotalBytes) {
    const e = new MessageTooLargeError(total, bounds.maxTotalBytes, "message");
    e.message = `a message of ${formatBytes(total)} in ${frames.length} frames was refused: over the ${formatBytes(bounds.maxTotalBytes)} limit on a whole message; nothing of it was processed. Upload large data in chunks (obj-begin/obj-chunk)`;
    return e;
  }
  return undefined;
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
  /**
   * ROUTER: judge every new connection in the ZeroMQ handshake by the ZAP
   * handler of `domain` (zap.ts): a PLAIN server unless it is a CURVE one,
   * so a client must present a gate proof (or a CURVE key); refused
   * connections are closed by ZeroMQ. Serve the domain before binding.
   */
  gateDomain?: string;
  /** ROUTER: a connection that has not finished the ZeroMQ handshake within this is closed. Default ZeroMQ's 30 s. */
  handshakeIntervalMs?: number;
  /** ROUTER: a connection failed the ZeroMQ handshake (refused by the gate, wrong security mechanism, not ZMTP) and was closed. */
  onHandshakeFailed?: (why: string) => void;
  /**
   * DEALER: prove this credential to the ROUTER before anything else is sent
   * (authenticator.ts); messages sent meanwhile wait. Answer a later challenge
   * (a restarted head) without holding anything.
   */
  auth?: Credential;
  /** DEALER with `auth`: the ROUTER refused the credential. Default: onError. */
  onAuthFailed?: (err: AuthError) => void;
  /** ROUTER: frames and total bytes of one message (default MESSAGE_BOUNDS). */
  bounds?: { maxFrames: number; maxTotalBytes: number };
  /**
   * ROUTER: a message broke `bounds`; it is not passed to the handler. The
   * owner decides whether the sender may be told (only a proven peer is).
   * Default: onError.
   */
  onRefused?: (routingId: Buffer, frames: Buffer[], err: MessageTooLargeError) => void;
}

const defaultOnError = (err: unknown): void => {
  console.error(`[hearth] ${err instanceof Error ? (err.stack ?? err.message) : String(err)}`);
};

/** What both wrappers share: one socket, its outbox, and how they end. */
abstract class Channel<S extends Dealer | Router> {
  protected readonly outbox: Outbox;
  protected closed = false;

  constructor(
    protected readonly socket: S,
    protected readonly onError: (err: unknown) => void,
  ) {
    this.outbox = new Outbox(socket, onError);
  }

  /** Resolves once everything queued that can go has been handed to ZeroMQ. */
  async flush(): Promise<void> {
    await this.outbox.drain();
  }

  /** Drops what is still queued and closes the socket. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    this.outbox.close();
    this.socket.close();
  }
}

/** A DEALER connected to one ROUTER (the head), identified by a routing id. */
export class DealerChannel extends Channel<Dealer> {
  private readonly routingId: Buffer;
  private readonly auth?: Credential;
  private readonly onAuthFailed: (err: AuthError) => void;
  /** Resolves when the credential was accepted the first time (at once without `auth`). */
  readonly authenticated: Promise<void>;

  /**
   * Calls `handler` each time the connection to the peer drops (ZeroMQ will
   * reconnect, but a request in flight on the lost connection is never
   * answered): a caller that cannot wait for a request deadline (a node
   * copying from another node) fails its pending requests at once.
   */
  onDisconnect(handler: () => void): void {
    this.socket.events.on("disconnect", () => handler());
  }
  private markAuthenticated: () => void = () => {};

  constructor(routingId: string, opts: ChannelOptions = {}) {
    const curve = opts.curveClient
      ? { curveServerKey: opts.curveClient.serverPublicKey, curvePublicKey: opts.curveClient.publicKey, curveSecretKey: opts.curveClient.secretKey }
      : {};
    // Without CURVE, a credential is also proven in the ZeroMQ handshake, where a server's gate judges connections (zap.ts).
    const gate = opts.auth && !opts.curveClient ? gateCredentials(opts.auth) : undefined;
    if (opts.auth && !opts.curveClient && !gate) throw new AuthError(`the credential of ${opts.auth.role} '${opts.auth.id.slice(0, 80)}' is too long to present at the handshake (id and app of at most 190 bytes)`);
    const plain = gate ? { plainUsername: gate.username, plainPassword: gate.password } : {};
    super(new Dealer({ routingId, linger: 200, sendHighWaterMark: 0, receiveHighWaterMark: 0, ...curve, ...plain }), opts.onError ?? defaultOnError);
    this.routingId = Buffer.from(routingId);
    if (opts.maxMessageSize) this.socket.maxMessageSize = opts.maxMessageSize;
    this.auth = opts.auth;
    this.onAuthFailed = opts.onAuthFailed ?? ((err) => this.onError(err));
    this.outbox.held = this.auth !== undefined;
    this.authenticated = this.auth ? new Promise((r) => (this.markAuthenticated = r)) : Promise.resolve();
    if (opts.auth && gate) this.watchHandshake(opts.auth);
  }

  /**
   * A gate that refuses the connection does so in the ZeroMQ handshake, where
   * no hearth message can say why: the socket's monitor reports it, and it
   * becomes an AuthError (once per refusal streak: ZeroMQ keeps reconnecting).
   * A server of another security mechanism (CURVE) is not a refusal of the
   * credential: that connection never completes, and the caller's timeout
   * says so (ConnectError), as it does for a CURVE client with a wrong key.
   */
  private watchHandshake(cred: Credential): void {
    let reported = false;
    const who = `${cred.role} '${cred.id.slice(0, 80)}'${cred.app ? ` of app '${cred.app.slice(0, 80)}'` : ""}`;
    const refused = (why: string): void => {
      if (reported || this.closed) return;
      reported = true;
      this.onAuthFailed(new AuthError(`the server refused this connection in the ZeroMQ handshake (${why}): a wrong credential for ${who}, or this host holds the server's maximum of connections (hearth head --max-connections-per-source). Check the credential (HEARTH_HOME's secret, or the app token)`));
    };
    const events = this.socket.events;
    events.on("handshake", () => (reported = false));
    events.on("handshake:error:auth", (e) => refused(`ZAP status ${e.error.status}`));
  }

  connect(endpoint: string): void {
    this.socket.connect(endpoint);
    if (this.auth) this.outbox.pushUrgent([AUTH_MARK, encode({ t: "auth-start" })]);
  }

  /** Answers the ROUTER's handshake messages (authenticator.ts). */
  private onHandshake(body: Buffer): void {
    const m = decode(body) as { t?: unknown; nonce?: unknown; error?: unknown };
    if (m.t === "challenge" && this.auth && (Buffer.isBuffer(m.nonce) || m.nonce instanceof Uint8Array)) {
      const { role, id, app, key } = this.auth;
      const mac = authMac(key, Buffer.from(m.nonce), this.routingId, role, id, app);
      this.outbox.pushUrgent([AUTH_MARK, encode({ t: "auth", role, id, app, mac })]);
    } else if (m.t === "auth-ok") {
      this.outbox.release();
      this.markAuthenticated();
    } else if (m.t === "auth-failed") {
      const e = fromWireError(m.error as WireError);
      this.onAuthFailed(e instanceof AuthError ? e : new AuthError(e.message));
    }
  }

  send(frames: Frames): void {
    this.outbox.push(frames);
  }

  /** Runs `handler` for every received message until `close()`. */
  async serve(handler: (frames: Buffer[]) => void | Promise<void>): Promise<void> {
    try {
      for await (const frames of this.socket) {
        try {
          if (isAuthMessage(frames)) {
            this.onHandshake(frames[1]!);
            continue;
          }
          await handler(frames);
        } catch (err) {
          this.onError(err);
        }
      }
    } catch (err) {
      if (!this.closed) this.onError(err);
    }
  }
}

/** A ROUTER bound to an endpoint; messages arrive with the sender's routing id first. */
export class RouterChannel extends Channel<Router> {
  private readonly bounds: { maxFrames: number; maxTotalBytes: number };
  private readonly onRefused: (routingId: Buffer, frames: Buffer[], err: MessageTooLargeError) => void;

  constructor(opts: ChannelOptions = {}) {
    const curve = opts.curveServerSecretKey ? { curveServer: true, curveSecretKey: opts.curveServerSecretKey } : {};
    const gate = opts.gateDomain !== undefined ? { zapDomain: opts.gateDomain, ...(opts.curveServerSecretKey ? {} : { plainServer: true }) } : {};
    const handshake = opts.handshakeIntervalMs !== undefined ? { handshakeInterval: opts.handshakeIntervalMs } : {};
    // No handover: a second connection that presents a live peer's routing id is refused by
    // ZeroMQ, so a routing id bound to a credential (authenticator.ts) cannot be taken over.
    super(new Router({ handover: false, linger: 200, sendHighWaterMark: 0, receiveHighWaterMark: 0, ...curve, ...gate, ...handshake }), opts.onError ?? defaultOnError);
    this.bounds = opts.bounds ?? MESSAGE_BOUNDS;
    this.onRefused = opts.onRefused ?? ((_id, _frames, err) => this.onError(err));
    if (opts.maxMessageSize) this.socket.maxMessageSize = opts.maxMessageSize;
    const failed = opts.onHandshakeFailed;
    if (failed) {
      const events = this.socket.events;
      events.on("handshake:error:auth", (e) => failed(`refused by the gate (ZAP status ${e.error.status})`));
      events.on("handshake:error:protocol", (e) => failed(e.error.code === "ERR_ZMTP_MECHANISM_MISMATCH" ? "no credential in the handshake (security mechanism mismatch)" : e.error.message));
      events.on("handshake:error:other", (e) => failed(e.error.message));
    }
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
          const refused = checkMessageBounds(frames, this.bounds);
          if (refused) {
            this.onRefused(id!, frames, refused);
            continue;
          }
          await handler(id!, frames);
        } catch (err) {
          this.onError(err);
        }
      }
    } catch (err) {
      if (!this.closed) this.onError(err);
    }
  }
}
