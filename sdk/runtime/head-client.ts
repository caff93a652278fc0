/**
 * A driver's connection to the head: control requests (`req` → `rep`), calls
 * (`call` + args frame → `result` + value frame, or `failed`), heartbeats,
 * and detection of a head that stopped answering.
 */
import { createHmac, randomUUID } from "node:crypto";
import { DealerChannel } from "../wire/channel.js";
import { MESSAGE_LIMIT, decode, decodeHeader, encode, num, type Header } from "../wire/codec.js";
import { ClosedError, HeadRestartedError, HearthError, TimeoutError } from "../errors/index.js";
import { ConnectError, MessageTooLargeError, ProtocolError, fromWireError, type WireError } from "../wire/errors.js";
import { PendingRequests, type Reply, type Requester } from "../wire/requests.js";
import { curveClientFromEnv, type CurveClientKeys } from "../wire/curve.js";
import { driverCredential, type Credential } from "../wire/auth.js";
import type { AuthError } from "../wire/errors.js";

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  /** Clears the driver-side deadline timer and the abort listener. */
  cleanup?: () => void;
}

/** Per-call controls: a deadline and a way out. */
export interface CallOptions {
  /**
   * Fail the call with TimeoutError this long after it was sent. The head
   * enforces it (and kills and replaces the executor running it); the driver
   * gives up on its own CALL_DEADLINE_SLACK_MS later if the head never answers.
   * Default: the service's `callTimeoutMs`, else no deadline.
   */
  timeoutMs?: number;
  /** Aborting rejects the call at once with the signal's reason; a queued call is dropped, a running one finishes unanswered. */
  signal?: AbortSignal;
}

/** How much later than a call's deadline the driver stops waiting for the head's TimeoutError. */
export const CALL_DEADLINE_SLACK_MS = 1_000;

/** Options for opening a client. */
export interface HeadClientOptions {
  /** How long to wait for the head to answer hello. Default 10 s. */
  timeoutMs?: number;
  /** Declare the head lost after this long without any message from it. Default 15 s. */
  headTimeoutMs?: number;
  /** CURVE client keys for a head that requires them. Default: the file named by HEARTH_CURVE_KEYS, if set. */
  curve?: CurveClientKeys;
  /**
   * The credential to prove: given explicitly, or the admin credential
   * (`admin: true`: shutdown, every app's status), else HEARTH_APP_TOKEN, else
   * the app's key derived from the cluster secret under `home` (HEARTH_HOME).
   */
  credential?: Credential;
  /** Prove the admin credential (needs the cluster secret). */
  admin?: boolean;
  /** Where the cluster secret is. Default HEARTH_SECRET_FILE, else HEARTH_HOME. */
  home?: string;
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
  /** The head instance this connection said hello to; a different one answering means the head restarted. */
  private headId: string | undefined;
  /** Set once the head was seen to restart: every later call fails at once with it. */
  private restarted?: HeadRestartedError;
  /** Replies that arrived for a call no longer pending (tests check this stays 0). */
  duplicateReplies = 0;

  /** Set when the head refused the credential. */
  private authFailed?: AuthError;
  private onAuthFailed: (err: AuthError) => void = () => {};

  private constructor(
    readonly endpoint: string,
    private readonly headTimeoutMs: number,
    curve: CurveClientKeys | undefined,
    private readonly credential: Credential,
  ) {
    // A random routing id: the head binds it to the proven credential.
    this.channel = new DealerChannel(`d.${randomUUID()}`, {
      maxMessageSize: 64 * 1024 * 1024,
      curveClient: curve,
      auth: credential,
      onAuthFailed: (err) => {
        this.authFailed = err;
        this.onAuthFailed(err);
      },
    });
    this.requests = new PendingRequests(this.channel, `head at ${endpoint}`);
  }

  /**
   * A key derived from this connection's credential for `purpose`
   * (HMAC-SHA256, hex): the same for every driver that proves the same
   * credential, unknown to anyone without it (executors included).
   */
  deriveKey(purpose: string): string {
    return createHmac("sha256", this.credential.key).update(`hearth-derived:${purpose}`).digest("hex");
  }

  /** Connects and says hello for `app`; rejects with ConnectError if no head answers. */
  static async open(endpoint: string, hello: Record<string, unknown>, opts: HeadClientOptions = {}): Promise<{ client: HeadClient; hello: any }> {
    const { client, reply } = await HeadClient.first(endpoint, typeof hello.app === "string" ? hello.app : "", "hello", hello, opts);
    client.headId = typeof reply.headId === "string" ? reply.headId : undefined;
    // A head that later refuses this credential (a restarted head with another secret) fails what is pending.
    client.onAuthFailed = (err) => client.failAll(err);
    client.heartbeat = setInterval(() => client.beat(), 1000);
    client.heartbeat.unref();
    return { client, hello: reply };
  }

  /** Asks the head one request that needs no app (e.g. `capacity`) with `app`'s credential, then disconnects; no app is opened. */
  static async ask<T = any>(endpoint: string, app: string, op: string, fields: Record<string, unknown> = {}, opts: HeadClientOptions = {}): Promise<T> {
    const { client, reply } = await HeadClient.first(endpoint, app, op, fields, opts);
    client.close();
    return reply as T;
  }

  /** Connects, proves the credential and sends the first request; rejects with ConnectError if no head answers. */
  private static async first(endpoint: string, app: string, op: string, fields: Record<string, unknown>, opts: HeadClientOptions): Promise<{ client: HeadClient; reply: any }> {
    const credential = opts.credential ?? driverCredential(app, { home: opts.home, admin: opts.admin });
    const client = new HeadClient(endpoint, opts.headTimeoutMs ?? 15_000, opts.curve ?? curveClientFromEnv(), credential);
    client.channel.connect(endpoint);
    void client.channel.serve((frames) => client.onMessage(frames));
    const timeoutMs = opts.timeoutMs ?? 10_000;
    try {
      const refused = new Promise<never>((_, reject) => (client.onAuthFailed = reject));
      refused.catch(() => undefined);
      return { client, reply: await Promise.race([client.control(op, fields, timeoutMs), refused]) };
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
    if (this.restarted) throw this.restarted;
    return (await this.requests.request<T>(op, fields, [], timeoutMs)).value;
  }

  /** Sends a request with payload frames and resolves with the reply's value and frames. */
  request<T = any>(op: string, fields: Record<string, unknown> = {}, frames: Array<Buffer | Uint8Array> = [], timeoutMs: number | null = 30_000): Promise<Reply<T>> {
    if (this.closed) return Promise.reject(new ClosedError(`the connection to ${this.endpoint} is closed`));
    if (this.restarted) return Promise.reject(this.restarted);
    return this.requests.request<T>(op, fields, frames, timeoutMs);
  }

  /**
   * Sends one call; rejects at once with MessageTooLargeError if the arguments
   * are too big. `opts.timeoutMs` travels to the head, which enforces it;
   * `executor` pins a pool call to one member.
   */
  call(serviceId: string, method: string, args: unknown[], rank?: number, opts: CallOptions = {}, executor?: string): Promise<unknown> {
    if (this.closed) return Promise.reject(new ClosedError(`the connection to ${this.endpoint} is closed`));
    if (this.restarted) return Promise.reject(this.restarted);
    const { timeoutMs, signal } = opts;
    if (timeoutMs !== undefined && !(timeoutMs > 0 && Number.isFinite(timeoutMs))) {
      return Promise.reject(new RangeError(`call timeoutMs must be a positive number of milliseconds; got ${timeoutMs}`));
    }
    if (signal?.aborted) return Promise.reject(abortReason(signal, method));
    const cid = this.nextCid++;
    const header = encode(executor === undefined ? { t: "call", cid, svc: serviceId, method, rank, timeoutMs } : { t: "call", cid, svc: serviceId, method, timeoutMs, exe: executor });
    const payload = encode(args);
    const size = header.byteLength + payload.byteLength;
    if (size > MESSAGE_LIMIT) return Promise.reject(new MessageTooLargeError(size, MESSAGE_LIMIT, `the arguments of ${method}()`));
    return new Promise((resolve, reject) => {
      const p: Pending = { resolve, reject };
      const giveUp = (err: Error): void => {
        if (this.calls.get(cid) !== p) return;
        this.calls.delete(cid);
        p.cleanup?.();
        this.channel.send([encode({ t: "cancel", cid })]);
        reject(err);
      };
      let timer: NodeJS.Timeout | undefined;
      if (timeoutMs !== undefined) {
        // The head answers TimeoutError at the deadline; this backstop covers a head that cannot.
        timer = setTimeout(
          () => giveUp(new TimeoutError(`call ${cid} (${method}) got no answer from the head at ${this.endpoint} within ${timeoutMs / 1000} s`, { callId: cid })),
          timeoutMs + CALL_DEADLINE_SLACK_MS,
        );
      }
      const onAbort = (): void => giveUp(abortReason(signal!, method));
      signal?.addEventListener("abort", onAbort, { once: true });
      if (timer || signal) {
        p.cleanup = () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
        };
      }
      this.calls.set(cid, p);
      this.channel.send([header, payload]);
    });
  }

  /** The head instance id this connection said hello to. */
  get head(): string | undefined {
    return this.headId;
  }

  /** Calls waiting for an answer. */
  get pendingCalls(): number {
    return this.calls.size;
  }

  /** The head's refusal of this connection's credential, if it refused it. */
  get refusal(): AuthError | undefined {
    return this.authFailed;
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
    if (typeof h.head === "string" && this.headId !== undefined && h.head !== this.headId) return this.onHeadRestarted(h.head);
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
    p.cleanup?.();
    return p;
  }

  /**
   * Another head instance answered on our endpoint: the one we said hello to
   * is gone with everything pending on it. Fail it all now (retryable) rather
   * than wait for deadlines, and refuse later work on this connection.
   */
  private onHeadRestarted(newHeadId: string): void {
    if (this.restarted) return;
    const pending = this.calls.size + this.requests.size;
    this.restarted = new HeadRestartedError(
      `the head at ${this.endpoint} restarted (instance ${this.headId} → ${newHeadId}); ${pending} pending call(s)/request(s) on the old head were lost. ` +
        "Retryable: connect() again, declare the services again, and retry the work.",
      { oldHeadId: this.headId, newHeadId },
    );
    this.failAll(this.restarted);
  }

  private failAll(err: Error, closeForGood = false): void {
    this.requests.failAll(err, closeForGood);
    for (const p of this.calls.values()) {
      p.cleanup?.();
      p.reject(err);
    }
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

  /** True once another head instance answered on this endpoint (see HeadRestartedError). */
  get headRestarted(): boolean {
    return this.restarted !== undefined;
  }

  /** Waits until queued messages are handed to ZeroMQ. */
  flush(): Promise<void> {
    return this.channel.flush();
  }
}

/** The error an aborted call rejects with: the signal's reason when it is an Error. */
function abortReason(signal: AbortSignal, method: string): Error {
  const r: unknown = signal.reason;
  return r instanceof Error ? r : new HearthError(`call ${method}() was aborted${r === undefined ? "" : `: ${String(r)}`}`);
}
