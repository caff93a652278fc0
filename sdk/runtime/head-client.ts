/**
 * A driver's connection to the head: control requests (`req` → `rep`), calls
 * (`call` + args frame → `result` + value frame, or `failed`), heartbeats,
 * and detection of a head that stopped answering.
 */
import { randomUUID } from "node:crypto";
import { DealerChannel } from "../wire/channel.js";
import { MESSAGE_LIMIT, decode, decodeHeader, encode, num, type Header } from "../wire/codec.js";
import { ClosedError, ConnectError, MessageTooLargeError, ProtocolError, TimeoutError, fromWireError, type WireError } from "../wire/errors.js";
import { PendingRequests, type Reply, type Requester } from "../wire/requests.js";
import { curveClientFromEnv, type CurveClientKeys } from "../wire/curve.js";

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
}

/** Options for opening a client. */
export interface HeadClientOptions {
  /** How long to wait for the head to answer hello. Default 10 s. */
  timeoutMs?: number;
  /** Declare the head lost after this long without any message from it. Default 15 s. */
  headTimeoutMs?: number;
  /** CURVE client keys for a head that requires them. Default: the file named by HEARTH_CURVE_KEYS, if set. */
  curve?: CurveClientKeys;
}

/** The low-level driver connection; App and handles are built on it. */
export class HeadClient implements Requester {
  private readonly channel: DealerChannel;
  private readonly requests: PendingRequests;
  private readonly calls = new Map<number, Pending>();
  private nextCid = 1;
  private lastHeard = Date.now();
  private heartbeat?: NodeJS.Timeout;
  private closed = false;
  /** Replies that arrived for a call no longer pending (tests check this stays 0). */
  duplicateReplies = 0;

  private constructor(
    readonly endpoint: string,
    private readonly headTimeoutMs: number,
    curve: CurveClientKeys | undefined,
  ) {
    this.channel = new DealerChannel(`d.${randomUUID()}`, { maxMessageSize: 64 * 1024 * 1024, curveClient: curve });
    this.requests = new PendingRequests(this.channel, `head at ${endpoint}`);
  }

  /** Connects and says hello for `app`; rejects with ConnectError if no head answers. */
  static async open(endpoint: string, hello: Record<string, unknown>, opts: HeadClientOptions = {}): Promise<{ client: HeadClient; hello: any }> {
    const client = new HeadClient(endpoint, opts.headTimeoutMs ?? 15_000, opts.curve ?? curveClientFromEnv());
    client.channel.connect(endpoint);
    void client.channel.serve((frames) => client.onMessage(frames));
    const timeoutMs = opts.timeoutMs ?? 10_000;
    try {
      const reply = await client.control("hello", hello, timeoutMs);
      client.heartbeat = setInterval(() => client.beat(), 1000);
      client.heartbeat.unref();
      return { client, hello: reply };
    } catch (err) {
      client.close();
      if (err instanceof TimeoutError) {
        throw new ConnectError(
          `no hearth head answered at ${endpoint} within ${timeoutMs / 1000} s; start one with \`hearth up\` (or \`hearth head\`), or connect without an endpoint to use the embedded default`,
        );
      }
      throw err;
    }
  }

  /** Sends a control request and resolves with its value; `timeoutMs` null waits for ever (e.g. for a gang). */
  async control<T = any>(op: string, fields: Record<string, unknown> = {}, timeoutMs: number | null = 30_000): Promise<T> {
    if (this.closed) throw new ClosedError(`the connection to ${this.endpoint} is closed`);
    return (await this.requests.request<T>(op, fields, [], timeoutMs)).value;
  }

  /** Sends a request with payload frames and resolves with the reply's value and frames. */
  request<T = any>(op: string, fields: Record<string, unknown> = {}, frames: Array<Buffer | Uint8Array> = [], timeoutMs: number | null = 30_000): Promise<Reply<T>> {
    if (this.closed) return Promise.reject(new ClosedError(`the connection to ${this.endpoint} is closed`));
    return this.requests.request<T>(op, fields, frames, timeoutMs);
  }

  /** Sends one call; rejects at once with MessageTooLargeError if the arguments are too big. */
  call(serviceId: string, method: string, args: unknown[], rank?: number, executor?: string): Promise<unknown> {
    if (this.closed) return Promise.reject(new ClosedError(`the connection to ${this.endpoint} is closed`));
    const cid = this.nextCid++;
    const header = encode(executor === undefined ? { t: "call", cid, svc: serviceId, method, rank } : { t: "call", cid, svc: serviceId, method, exe: executor });
    const payload = encode(args);
    const size = header.byteLength + payload.byteLength;
    if (size > MESSAGE_LIMIT) return Promise.reject(new MessageTooLargeError(size, MESSAGE_LIMIT, `the arguments of ${method}()`));
    return new Promise((resolve, reject) => {
      this.calls.set(cid, { resolve, reject });
      this.channel.send([header, payload]);
    });
  }

  /** Calls waiting for an answer. */
  get pendingCalls(): number {
    return this.calls.size;
  }

  private beat(): void {
    this.channel.send([encode({ t: "hb" })]);
    const silent = Date.now() - this.lastHeard;
    if (silent > this.headTimeoutMs && (this.calls.size > 0 || this.requests.size > 0)) {
      this.failAll(new ConnectError(`lost the head at ${this.endpoint}: nothing heard for ${Math.round(silent / 1000)} s`));
    }
  }

  private onMessage(frames: Buffer[]): void {
    this.lastHeard = Date.now();
    const h: Header = decodeHeader(frames[0]);
    switch (h.t) {
      case "rep":
        this.requests.deliver(h, frames);
        return;
      case "result": {
        const p = this.take(this.calls, num(h, "cid"));
        if (!p) return;
        try {
          p.resolve(decode(frames[1] ?? encode(null)));
        } catch (err) {
          p.reject(err as Error);
        }
        return;
      }
      case "failed": {
        const p = this.take(this.calls, num(h, "cid"));
        if (p) p.reject(fromWireError(h.error as WireError));
        return;
      }
      case "hb":
        return;
      case "err":
        throw new ProtocolError(`head rejected a message: ${(h.error as WireError | undefined)?.message ?? "?"}`);
      default:
        throw new ProtocolError(`unexpected message '${h.t}' from the head`);
    }
  }

  private take(map: Map<number, Pending>, id: number): Pending | undefined {
    const p = map.get(id);
    if (!p) {
      this.duplicateReplies++;
      return undefined;
    }
    map.delete(id);
    return p;
  }

  private failAll(err: Error, closeForGood = false): void {
    this.requests.failAll(err, closeForGood);
    for (const p of this.calls.values()) p.reject(err);
    this.calls.clear();
  }

  /** Closes the socket; pending work fails with ClosedError. Idempotent. */
  close(): void {
    if (this.closed) return;
    this.closed = true;
    clearInterval(this.heartbeat);
    this.failAll(new ClosedError(`the connection to ${this.endpoint} was closed`), true);
    this.channel.close();
  }

  /** Waits until queued messages are handed to ZeroMQ. */
  flush(): Promise<void> {
    return this.channel.flush();
  }
}
