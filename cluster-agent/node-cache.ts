/**
 * The node cache: one per agent. Executors on the node read objects through
 * it, so a version crosses from the head to the node once. It serves every
 * request as its own task: a miss that pulls a large object from the head
 * does not hold up another executor's hit, and concurrent misses for one
 * object share a single fetch.
 *
 * A hit still asks the head whether the held version is the latest (a small
 * `obj-get` that answers not-modified). That question rides the agent's own
 * head connection, while the chunks of large objects ride a second, bulk
 * connection: on one TCP stream the check would queue behind the chunks
 * already in flight for someone else's miss.
 */
import { randomBytes } from "node:crypto";
import { DealerChannel, RouterChannel } from "../sdk/wire/channel.js";
import { decodeHeader, encode, num, str } from "../sdk/wire/codec.js";
import { HearthError } from "../sdk/errors/index.js";
import { toWireError } from "../sdk/wire/errors.js";
import { PendingRequests, type Requester } from "../sdk/wire/requests.js";
import { curveClientFromEnv } from "../sdk/wire/curve.js";
import { credentialFrom, deriveKey, type Role } from "../sdk/wire/auth.js";
import { checkGateProof, serveZapDomain } from "../sdk/wire/zap.js";
import { Authenticator, type Peer } from "../sdk/wire/authenticator.js";
import { download } from "../sdk/cache/transfer.js";
import { ObjectStore } from "./head/object-store.js";
import { ObjectService } from "./object-service.js";

/** Largest message on the cache and bulk sockets (a chunk is 8 MiB). */
const MAX_MESSAGE = 64 * 1024 * 1024;
/** The ZAP domain of the cache socket's gate. */
const CACHE_ZAP_DOMAIN = "hearth-agent-cache";
/** Executors are local: a connection still in the ZeroMQ handshake after this is closed. */
const HANDSHAKE_MS = 10_000;

/** What the node cache needs from its agent. */
export interface NodeCacheOptions {
  /** The agent's id: the bulk connection proves the agent role under it. */
  agentId: string;
  /** The head's endpoint (the bulk connection goes there). */
  head: string;
  /** The cluster secret: it proves the agent at the head and checks executors here. */
  secret: Buffer;
  /** Requests to the head over the agent's own connection (freshness checks go there). */
  control: Requester;
  /** Memory bound of the cached objects, in bytes. */
  memLimit: number;
  /** The app an executor of this agent runs, or undefined when it runs no executor of that id here. */
  appOf: (executorId: string) => string | undefined;
  log: (line: string) => void;
}

/** Counters of the node cache's gets and head fetches. */
export interface NodeCacheFetches {
  /** `obj-get` requests from executors. */
  gets: number;
  /** Fetches sent to the head (one per miss or freshness check that found no fetch in flight). */
  started: number;
  /** Gets that found a fetch of their object in flight and waited for it instead. */
  joined: number;
}

/** A running node cache. */
export class NodeCache {
  /** The objects and the `obj-*` protocol served to executors (read-only: writes go to the head). */
  readonly service: ObjectService;
  readonly fetches: NodeCacheFetches = { gets: 0, started: 0, joined: 0 };
  private readonly socket: RouterChannel;
  private readonly auth: Authenticator;
  private readonly bulk: DealerChannel;
  private readonly bulkRequests: PendingRequests;
  /** Routes chunk pulls to the bulk connection and everything else to the agent's. */
  private readonly head: Requester;
  private readonly inFlight = new Map<string, Promise<void>>();
  private endpoint = "";
  private stopGate?: () => void;

  constructor(private readonly opts: NodeCacheOptions) {
    this.service = new ObjectService(new ObjectStore({ memLimit: opts.memLimit }), { readOnly: true });
    this.socket = new RouterChannel({
      maxMessageSize: MAX_MESSAGE,
      onError: (err) => opts.log(`cache socket error: ${String(err)}`),
      gateDomain: CACHE_ZAP_DOMAIN,
      handshakeIntervalMs: HANDSHAKE_MS,
    });
    this.auth = new Authenticator({
      name: "agent cache",
      keyFor: (role, id, app) => this.keyFor(role, id, app),
      send: (id, frames) => this.socket.sendTo(id, frames),
      deliver: (peer, frames) => void this.serve(peer, frames),
      log: opts.log,
    });
    // Its own random routing id under the agent credential: the head answers requests on it like the agent's own.
    this.bulk = new DealerChannel(`a.${opts.agentId}.bulk.${randomBytes(12).toString("hex")}`, {
      maxMessageSize: MAX_MESSAGE,
      onError: (err) => opts.log(`bulk socket error: ${String(err)}`),
      curveClient: curveClientFromEnv(),
      auth: credentialFrom(opts.secret, "agent", opts.agentId),
      onAuthFailed: (err) => opts.log(`the head refused the node cache's credential: ${err.message}`),
    });
    this.bulkRequests = new PendingRequests(this.bulk, `head at ${opts.head} (bulk)`);
    const bulkRequests = this.bulkRequests;
    this.head = {
      request: (op, fields, frames, timeoutMs) => (op === "obj-read" || op === "obj-done" ? bulkRequests : opts.control).request(op, fields, frames, timeoutMs),
    };
  }

  /** The key an executor of this node proves, or why the claim may not read here. */
  private keyFor(role: Role, id: string, app: string): Buffer | string {
    if (role !== "executor") return "only executors read an agent's cache";
    return this.opts.appOf(id) === app ? deriveKey(this.opts.secret, "executor", id, app) : `executor ${id} of app '${app}' does not run on agent ${this.opts.agentId}`;
  }

  /**
   * Binds the executors' socket on loopback, behind the connection gate (a
   * connection without an executor credential of this node is closed in the
   * ZeroMQ handshake: sdk/wire/zap.ts), and connects the bulk connection;
   * returns the endpoint executors dial.
   */
  async start(): Promise<string> {
    this.stopGate = await serveZapDomain(CACHE_ZAP_DOMAIN, (req) => (req.mechanism === "PLAIN" ? checkGateProof(req.credentials, (role, id, app) => this.keyFor(role, id, app)) : "no executor credential in the handshake"));
    this.endpoint = await this.socket.bind("tcp://127.0.0.1:0");
    void this.socket.serve((id, frames) => this.auth.receive(id, frames));
    this.bulk.connect(this.opts.head);
    void this.bulk.serve((frames) => {
      const h = decodeHeader(frames[0]);
      if (h.t === "rep") this.bulkRequests.deliver(h, frames);
      else if (h.t === "err") this.opts.log(`head rejected a bulk message: ${JSON.stringify(h.error)}`);
      // Anything else (a `reregister` while the head restarts) is the agent's business on its own connection.
    });
    return this.endpoint;
  }

  /** Where executors dial (set by start()). */
  get address(): string {
    return this.endpoint;
  }

  /** Drops stale handshakes and idle transfers; the agent calls it with its heartbeat. */
  sweep(now = Date.now()): void {
    this.auth.sweep(now);
    this.service.expire(now);
  }

  /** Objects and bytes held on this node (the agent's heartbeat reports them; the head's status shows them). */
  usage(): { objects: number; bytes: number } {
    const u = this.service.store.usage();
    return { objects: u.objects, bytes: u.bytes };
  }

  /**
   * Drops the copies of app `app`'s objects under `prefix` ("": all of
   * them): the head deleted them, or released the app. (A copy whose fetch
   * was in flight when the notice came is installed after it; only the
   * memory limit's LRU bounds such a copy.)
   */
  drop(app: string, prefix: string): number {
    return this.service.store.delete(`${app}/${prefix}`);
  }

  /** The latest bytes of `app/key` (the first part), fetched from the head when needed: project archives. */
  async read(app: string, key: string): Promise<Buffer> {
    await this.refresh(app, key);
    const r = this.service.store.read(`${app}/${key}`);
    if (r.mode === "not-modified") throw new HearthError(`node cache: ${app}/${key} read back as not-modified`);
    return r.parts[0]!.data!;
  }

  /** One executor request, answered on its own: awaiting the head here never delays another request. */
  private async serve(peer: Peer, frames: Buffer[]): Promise<void> {
    let rid: number | undefined;
    try {
      const h = decodeHeader(frames[0]);
      rid = num(h, "rid");
      // The executor and app it proved at the handshake (its credential names both).
      const app = this.opts.appOf(peer.id);
      if (!app || app !== peer.app) throw new HearthError(`unknown executor '${peer.id}' on agent ${this.opts.agentId}`);
      const op = str(h, "op");
      if (op === "obj-get") {
        this.fetches.gets++;
        await this.refresh(app, str(h, "key"));
      }
      const r = await this.service.serve(op, app, h, frames, "executor", peer.routingId.toString("latin1"));
      const value = op === "obj-stat" ? { ...(r.value as object), fetches: this.fetches } : r.value;
      this.socket.sendTo(peer.routingId, [encode({ t: "rep", rid, ok: true, value }), ...(r.frames ?? [])]);
    } catch (err) {
      const reply = rid !== undefined ? { t: "rep", rid, ok: false, error: toWireError(err) } : { t: "err", error: toWireError(err) };
      this.socket.sendTo(peer.routingId, [encode(reply)]);
    }
  }

  /** Brings the local copy of `app/key` to the head's latest version; concurrent callers share one fetch. */
  private refresh(app: string, key: string): Promise<void> {
    const full = `${app}/${key}`;
    const running = this.inFlight.get(full);
    if (running) {
      this.fetches.joined++;
      return running;
    }
    this.fetches.started++;
    const held = this.service.store.peek(full);
    const p = download(this.head, { app, key, have: held?.version, haveBase: held?.baseVersion })
      .then((d) => this.service.store.replicate(full, d))
      .finally(() => this.inFlight.delete(full));
    this.inFlight.set(full, p);
    return p;
  }

  /** Closes both sockets (after what is queued has gone out). */
  async close(): Promise<void> {
    this.bulkRequests.failAll(new HearthError("the node cache closed"));
    await Promise.all([this.bulk.flush(), this.socket.flush()]);
    this.bulk.close();
    this.socket.close();
    this.stopGate?.();
  }
}
