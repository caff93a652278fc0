/**
 * The node cache: one per agent. Executors on the node read objects through
 * it, so a version crosses to the node once, and the node keeps one copy:
 * small parts in memory, large parts as files in its cache dir (one folder
 * per app, readable by that app's executors only when they run as its own
 * user), which executors and their engines read in place (`obj-open` answers
 * with paths, not bytes).
 *
 * A copy comes from the head or, for a large object another node already
 * holds or is receiving, from that node (`peer` in the head's answer): the
 * head sends a base once, and nodes pass it on in a chain, each serving
 * chunks while it still receives them. A peer that fails is left for the
 * head, keeping the chunks already written. A copy is installed only once
 * whole; until then readers get the last complete version.
 *
 * Every request is served as its own task: a miss that pulls a large object
 * does not hold up another executor's hit, and concurrent misses for one
 * object share a single fetch. A hit still asks the head whether the held
 * version is the latest (a small `obj-get`); that question rides the
 * agent's own head connection, while chunks ride a second, bulk connection.
 */
import { randomBytes } from "node:crypto";
import { chmodSync, chownSync, lstatSync, mkdirSync } from "node:fs";
import path from "node:path";
import { createHash } from "node:crypto";
import { DealerChannel, RouterChannel } from "../sdk/wire/channel.js";
import { decodeHeader, encode, num, optNum, str, type Header } from "../sdk/wire/codec.js";
import { HearthError } from "../sdk/errors/index.js";
import { toWireError } from "../sdk/wire/errors.js";
import { PendingRequests, type Requester } from "../sdk/wire/requests.js";
import { curveClientFromEnv } from "../sdk/wire/curve.js";
import { credentialFrom, deriveKey, type Role } from "../sdk/wire/auth.js";
import { checkGateProof, serveZapDomain, type ZapRequest } from "../sdk/wire/zap.js";
import { connectionsFrom } from "./head/source-connections.js";
import { Authenticator, type Peer } from "../sdk/wire/authenticator.js";
import { allocObjectBuffer } from "../sdk/cache/buffers.js";
import { fileChunks } from "../sdk/cache/file-io.js";
import { ObjectStore, isFilePart, type StoredObject } from "./head/object-store.js";
import { ObjectService } from "./object-service.js";
import { storedSource, type PartSource } from "./part-source.js";
import type { SealNotice } from "./seal-notice.js";
import { NodeFetcher, type FetchCounters, type Receiving } from "./node-fetch.js";
import { KeptUploads } from "./node-keep.js";
import { NodeFolders, parseFolder } from "./node-folders.js";
import { claimCacheDir, releaseCacheDir, sweepDeadCaches, type CacheDirClaim } from "./cache-dir.js";
import { formatBytes } from "../sdk/format.js";
import { roomOn, type Medium } from "./storage-medium.js";

/** Largest message on the cache and bulk sockets (a chunk is 8 MiB). */
const MAX_MESSAGE = 64 * 1024 * 1024;
/**
 * Bytes of small parts an `obj-open` answer carries inline at most. A base
 * of many small parts (each up to 1 MiB) would otherwise pass the executors'
 * 64 MiB message limit; the rest is pulled like any object (`tid`).
 */
export const OPEN_INLINE_BYTES = 16 * 1024 * 1024;
/** The ZAP domain of the cache socket's gate. */
const CACHE_ZAP_DOMAIN = "hearth-agent-cache";
/** A connection still in the ZeroMQ handshake after this is closed. */
const HANDSHAKE_MS = 10_000;

/** What the node cache needs from its agent. */
export interface NodeCacheOptions {
  /** The agent's id: the bulk connection proves the agent role under it. */
  agentId: string;
  /** The head's endpoint (the bulk connection goes there). */
  head: string;
  /** The cluster secret: it proves the agent at the head and checks executors and peers here. */
  secret: Buffer;
  /** Requests to the head over the agent's own connection (freshness checks go there). */
  control: Requester;
  /** Memory bound of small parts, in bytes. */
  memLimit: number;
  /** Folder of the node's part files (emptied at start: it is a cache). */
  cacheDir: string;
  /** Bytes of part files at most. */
  fileLimit: number;
  /** What the cache dir is on (memory-backed or disk), and why: status shows it. */
  medium?: Medium;
  /** Where agents' default cache folders lie side by side (/dev/shm, the executor dir), and their names: at start, those that agents no longer running left are removed (cache-dir.ts sweepDeadCaches). */
  siblings?: { parent: string; names: RegExp };
  /** The address other nodes dial for pass-through (the cache also listens on loopback for its executors). */
  host: string;
  /** The app an executor of this agent runs, or undefined when it runs no executor of that id here. */
  appOf: (executorId: string) => string | undefined;
  /** The group of an app's executors when they run as that app's own user (its files are made readable to it alone), else undefined. */
  groupOf: (app: string) => number | undefined;
  /** The user an app's executors run as (only its files are kept as the node's copy, node-keep.ts), or undefined when it is not known (nothing is kept). */
  userOf: (app: string) => number | undefined;
  /** TCP connections one address may hold to the cache; beyond it new ones are refused in the handshake. Default 4096. */
  maxConnectionsPerSource?: number;
  log: (line: string) => void;
}

/** Counters of the node cache's gets and fetches. */
export interface NodeCacheFetches extends FetchCounters {
  /** `obj-get`/`obj-open` requests from executors. */
  gets: number;
}

/** A running node cache. */
export class NodeCache {
  /** The objects and the `obj-*` protocol served to executors and peers (read-only: writes go to the head). */
  readonly service: ObjectService;
  private readonly fetcher: NodeFetcher;
  private readonly folders: NodeFolders;
  private readonly keeps: KeptUploads;
  private readonly socket: RouterChannel;
  private readonly auth: Authenticator;
  private readonly bulk: DealerChannel;
  private readonly bulkRequests: PendingRequests;
  private readonly appDirs = new Map<string, string>();
  private gets = 0;
  private endpoint = "";
  private peerEndpoint = "";
  private ports: number[] = [];
  private stopGate?: () => void;
  private claim?: CacheDirClaim;

  constructor(private readonly opts: NodeCacheOptions) {
    const store = new ObjectStore({
      memLimit: opts.memLimit,
      fileLimit: opts.fileLimit,
      files: { dirFor: (key) => this.appDir(key.slice(0, key.indexOf("/"))) },
      // The limit is also what the cache dir's file system has left (a tmpfs other caches share)…
      spaceLeft: () => roomOn(opts.cacheDir),
      // …and it bounds the node's folders too, whose hard links keep bytes the cache dropped, and what writers handed over before their commit.
      extraFiles: { bytes: () => this.folders.heldBytes() + this.keeps.bytes + this.fetcher.precopies.bytes, dropOne: () => this.folders.dropOne() },
    });
    this.service = new ObjectService(store, { readOnly: true });
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
    const fileMode = (app: string): number => (opts.groupOf(app) === undefined ? 0o600 : 0o640);
    this.fetcher = new NodeFetcher({ store, control: opts.control, bulk: this.bulkRequests, agentId: opts.agentId, secret: opts.secret, fileMode, log: opts.log });
    this.keeps = new KeptUploads({
      fileFor: (app) => store.receivingFile(`${app}/kept`),
      ownerOf: opts.userOf,
      groupOf: opts.groupOf,
      fileMode,
      maxBytes: opts.fileLimit,
    });
    this.folders = new NodeFolders(store, (app, key) => this.fetcher.refresh(app, key), (app) => this.appDir(app));
  }

  /** The key an executor of this node, or another node's cache, proves; or why the claim may not read here. */
  private keyFor(role: Role, id: string, app: string): Buffer | string {
    if (role === "agent") return deriveKey(this.opts.secret, "agent", id, app);
    if (role !== "executor") return "only executors and other nodes' caches read an agent's cache";
    return this.opts.appOf(id) === app ? deriveKey(this.opts.secret, "executor", id, app) : `executor ${id} of app '${app}' does not run on agent ${this.opts.agentId}`;
  }

  /**
   * Claims the cache dir (cache-dir.ts: one hearth made, or an empty one;
   * what a previous agent left there is not known to be whole and goes),
   * binds the socket on loopback (executors) and on the node's
   * address (peers), behind the connection gate (sdk/wire/zap.ts), and
   * connects the bulk connection; returns the endpoint executors dial.
   */
  async start(): Promise<string> {
    this.claim = claimCacheDir(this.opts.cacheDir, this.opts.agentId);
    const left = this.claim.leftover;
    if (left.entries > 0) this.opts.log(`node cache: removed what a previous agent left in ${this.claim.dir} (${left.entries} entries, ${formatBytes(left.bytes)})`);
    for (const s of this.opts.siblings ? sweepDeadCaches(this.opts.siblings.parent, this.opts.siblings.names, this.claim.dir) : []) {
      this.opts.log(`node cache: removed ${s.dir}, left by agent ${s.agent} that no longer runs (${s.entries} entries, ${formatBytes(s.bytes)})`);
    }
    if (this.opts.medium) this.opts.log(`node cache on ${this.opts.medium.kind} at ${this.claim.dir} (${this.opts.medium.why})`);
    this.stopGate = await serveZapDomain(CACHE_ZAP_DOMAIN, (req) => this.gate(req));
    this.endpoint = await this.socket.bind("tcp://127.0.0.1:0");
    this.peerEndpoint = /^(127\.|localhost$)/.test(this.opts.host) ? this.endpoint : await this.socket.bind(`tcp://${this.opts.host}:0`);
    this.ports = [...new Set([this.endpoint, this.peerEndpoint].map((e) => Number(/:(\d+)$/.exec(e)?.[1] ?? 0)))];
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

  /**
   * The gate (sdk/wire/zap.ts): a connection must prove an executor credential
   * of this node or another node's agent credential, and its address may hold
   * at most `maxConnectionsPerSource` connections to the cache (counted from
   * the kernel's TCP table, as the head counts them).
   */
  private gate(req: ZapRequest): string | undefined {
    if (req.mechanism !== "PLAIN") return "no credential in the handshake";
    const refusal = checkGateProof(req.credentials, (role, id, app) => this.keyFor(role, id, app));
    if (refusal !== undefined) return refusal;
    const cap = this.opts.maxConnectionsPerSource ?? 4096;
    let n = 0;
    for (const port of this.ports) n += connectionsFrom(req.address, port) ?? 0;
    return n > cap ? `${req.address} holds ${n} connections to the node cache, over its limit of ${cap} (hearth agent --cache-max-connections-per-source)` : undefined;
  }

  /** Where executors dial (set by start()). */
  get address(): string {
    return this.endpoint;
  }

  /** Where other nodes' caches dial for pass-through (reported to the head at register). */
  get peerAddress(): string {
    return this.peerEndpoint;
  }

  /** Drops stale handshakes and idle transfers; the agent calls it with its heartbeat. */
  sweep(now = Date.now()): void {
    this.auth.sweep(now);
    this.service.expire(now);
    this.fetcher.sweep(now);
    this.keeps.sweep(now);
  }

  /** Objects and bytes held on this node, and where (the agent's heartbeat reports them; the head's status shows them). */
  usage(): { objects: number; bytes: number; fileBytes: number; fileLimit: number; dir: string; medium: string } {
    const u = this.service.store.usage();
    return { objects: u.objects, bytes: u.bytes, fileBytes: u.fileUsed, fileLimit: this.opts.fileLimit, dir: this.opts.cacheDir, medium: this.opts.medium?.kind ?? "disk" };
  }

  /** Fetch counters (obj-stat answers them too). */
  get fetches(): NodeCacheFetches {
    return { gets: this.gets, ...this.fetcher.counters };
  }

  /**
   * Drops the copies of app `app`'s objects under `prefix` ("": all of
   * them): the head deleted them, or released the app. (A copy whose fetch
   * was in flight when the notice came is installed after it; only the
   * cache's limits bound such a copy.)
   */
  drop(app: string, prefix: string): number {
    return this.service.store.delete(`${app}/${prefix}`);
  }

  /** The head told of a base upload's part, commit or drop (obj-sealed): a copy of an object held here is made ahead (node-precopy.ts). */
  precopy(app: string, notice: SealNotice): void {
    this.fetcher.precopies.notice(app, notice);
  }

  /** The latest bytes of `app/key` (the first part), fetched from the head when needed: project archives. */
  async read(app: string, key: string): Promise<Buffer> {
    await this.fetcher.refresh(app, key);
    const full = `${app}/${key}`;
    const r = this.service.store.read(full);
    if (r.mode === "not-modified") throw new HearthError(`node cache: ${full} read back as not-modified`);
    const part = r.parts[0]!;
    if (part.data) return part.data;
    // A chunk at a time, each checked (readFileSync stops at 2 GiB and checks nothing).
    const data = allocObjectBuffer(part.size, { key, app });
    let at = 0;
    for await (const chunk of fileChunks(this.service.store.pathOf(r.object, part), part.size, part.sums, { key, app })) {
      chunk.copy(data, at);
      at += chunk.byteLength;
    }
    return data;
  }

  /** One executor or peer request, answered on its own: awaiting the head here never delays another request. */
  private async serve(peer: Peer, frames: Buffer[]): Promise<void> {
    let rid: number | undefined;
    try {
      const h = decodeHeader(frames[0]);
      rid = num(h, "rid");
      const r = peer.role === "agent" ? await this.servePeer(peer, h, frames) : await this.serveExecutor(peer, h, frames);
      this.socket.sendTo(peer.routingId, [encode({ t: "rep", rid, ok: true, value: r.value }), ...(r.frames ?? [])]);
    } catch (err) {
      const reply = rid !== undefined ? { t: "rep", rid, ok: false, error: toWireError(err) } : { t: "err", error: toWireError(err) };
      this.socket.sendTo(peer.routingId, [encode(reply)]);
    }
  }

  private async serveExecutor(peer: Peer, h: Header, frames: Buffer[]): Promise<{ value: unknown; frames?: Buffer[] }> {
    // The executor and app it proved at the handshake (its credential names both).
    const app = this.opts.appOf(peer.id);
    if (!app || app !== peer.app) throw new HearthError(`unknown executor '${peer.id}' on agent ${this.opts.agentId}`);
    const op = str(h, "op");
    const conn = peer.routingId.toString("latin1");
    if (op === "obj-open" && h.progressive === true) {
      this.gets++;
      // As soon as the head answered: the parts' paths, each followed with obj-wait while it still arrives.
      const copy = await this.fetcher.follow(app, str(h, "key"));
      if (copy) return this.openReceiving(app, str(h, "key"), h, copy);
      return this.open(app, h);
    }
    if (op === "obj-wait") {
      const key = str(h, "key");
      const version = num(h, "version");
      const copy = this.fetcher.receivingAt(app, key, version);
      const part = copy?.parts[num(h, "part")];
      if (part) await part.whole;
      else {
        // Not arriving any more: it was installed (the file stays while this base is held), or the copy failed.
        const held = this.service.store.peek(`${app}/${key}`);
        if (!held || held.baseVersion !== num(h, "baseVersion") || held.version < version) {
          throw new HearthError(`this node's copy of '${key}' at version ${version} did not complete (it holds ${held ? `version ${held.version}` : "none"}); get it again`);
        }
      }
      return { value: { ok: true } };
    }
    if (op === "obj-get" || op === "obj-open") {
      this.gets++;
      await this.fetcher.refresh(app, str(h, "key"));
    }
    if (op === "obj-open") return this.open(app, h);
    if (op === "obj-keep") {
      // A part of this executor's upload reached the head whole: its file becomes the node's (node-keep.ts).
      if (h.inline === true) this.keeps.keepSmall(app, str(h, "token"), num(h, "part"), frames[1] ?? Buffer.alloc(0), numbers(h.sums));
      else await this.keeps.keep(app, str(h, "token"), num(h, "part"), str(h, "file"), num(h, "size"), numbers(h.sums));
      return { value: { kept: true } };
    }
    if (op === "obj-kept") return { value: await this.kept(app, h) };
    if (op === "obj-folder") {
      const f = parseFolder(h.id, h.files);
      return { value: await this.folders.open(app, f.id, f.files) };
    }
    const r = await this.service.serve(op, app, h, frames, "executor", conn);
    return op === "obj-stat" ? { value: { ...(r.value as object), fetches: this.fetches, recent: this.fetcher.recent, receiving: this.fetcher.inProgress, keptBytes: this.keeps.bytes } } : r;
  }

  /**
   * An upload of this executor's ended: committed (`key` at `version`), its
   * kept parts are installed as the node's copy; dropped (`discard`), they go.
   */
  private async kept(app: string, h: Header): Promise<{ installed: boolean; why?: string }> {
    const token = str(h, "token");
    if (h.discard === true) {
      this.keeps.discard(app, token);
      return { installed: false, why: "discarded" };
    }
    const key = str(h, "key");
    const parts = this.keeps.claim(app, token);
    const why = parts ? await this.fetcher.adopt(app, key, num(h, "version"), num(h, "baseVersion"), parts) : "no part of it was kept here";
    if (why === undefined) return { installed: true };
    this.opts.log(`node cache: the upload of '${app}/${key}' v${num(h, "version")} was not kept as this node's copy (${why}); the node fetches it when it is read`);
    return { installed: false, why };
  }

  /** Another node's cache: the exact version it was told this node holds or receives, then its chunks. */
  private async servePeer(peer: Peer, h: Header, frames: Buffer[]): Promise<{ value: unknown; frames?: Buffer[] }> {
    const op = str(h, "op");
    const app = str(h, "app");
    if (op === "obj-get" && h.upload !== undefined) return { value: this.fetcher.precopies.serve(this.service, app, str(h, "key"), num(h, "upload"), num(h, "part")) };
    if (op === "obj-get") return { value: this.fetcher.servePeer(this.service, app, str(h, "key"), num(h, "baseVersion"), num(h, "baseParts"), optNum(h, "version")) };
    if (op === "obj-read" || op === "obj-done" || op === "obj-ack") return this.service.serve(op, app, h, frames, "agent", peer.routingId.toString("latin1"));
    throw new HearthError(`'${op}' is not served to other nodes (agent ${peer.id})`);
  }

  /** The parts an executor asked for, small ones inline and large ones as this node's files. */
  private open(app: string, h: Header): { value: unknown; frames: Buffer[] } {
    const key = str(h, "key");
    const r = this.service.store.read(`${app}/${key}`, typeof h.have === "number" ? h.have : undefined, typeof h.haveBase === "number" ? h.haveBase : undefined);
    if (r.mode === "not-modified") return { value: { mode: r.mode, version: r.version, baseVersion: r.baseVersion, parts: [] }, frames: [] };
    const reply = new OpenReply();
    for (const [i, p] of r.parts.entries()) {
      const meta = { kind: p.kind, dtype: p.dtype, size: p.size, version: p.version, ...(p.sums ? { sums: p.sums } : {}) };
      if (isFilePart(p.size)) reply.file(meta, this.service.store.pathOf(r.object, p));
      else reply.small(meta, p.data!, () => storedSource(this.service.store, r.object, p, i));
    }
    return reply.answer(this.service, app, { mode: r.mode, version: r.version, baseVersion: r.baseVersion }, r.object);
  }

  /**
   * A copy still arriving, as `obj-open` answers it: large parts at the
   * files they are written to in place (`pending` until whole: the executor
   * waits for each with `obj-wait`), small ones inline once they are here.
   * Only a full copy is followed (it is the whole answer whatever the
   * executor holds); patches are small, and answered once installed.
   */
  private async openReceiving(app: string, key: string, h: Header, copy: Receiving): Promise<{ value: unknown; frames: Buffer[] }> {
    if (copy.mode !== "full") {
      await this.fetcher.refresh(app, key);
      return this.open(app, h);
    }
    const reply = new OpenReply();
    for (const [i, p] of copy.parts.entries()) {
      const meta = { kind: p.meta.kind, dtype: p.meta.dtype, size: p.meta.size, version: p.meta.version, ...(p.meta.sums ? { sums: p.meta.sums } : {}) };
      // In place: the file keeps this name when the copy is installed.
      if (p.file) reply.file(meta, p.file, p.complete ? undefined : i);
      else {
        await p.whole;
        reply.small(meta, p.data!, () => p.source());
      }
    }
    return reply.answer(this.service, app, { mode: copy.mode, version: copy.version, baseVersion: copy.baseVersion });
  }

  /**
   * The folder of `app`'s part files: `u<gid>` (mode 2750, group the app's,
   * so its executors read it and no other app's can) when executors run as
   * the app's own user, else a private `a-<hash>` (0700).
   */
  private appDir(app: string): string {
    const known = this.appDirs.get(app);
    if (known) return known;
    const gid = this.opts.groupOf(app);
    const dir = path.join(this.opts.cacheDir, gid === undefined ? `a-${createHash("sha256").update(app).digest("hex").slice(0, 16)}` : `u${gid}`);
    // Inside the claimed folder (this user's, writable by no one else): made once, and never through a link.
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    if (!lstatSync(dir).isDirectory()) throw new HearthError(`${dir} is not a folder`);
    if (gid !== undefined) {
      // Root's, group the app's, setgid: files made here take the app's group, which is how its
      // executors (and no other app's) read them; they cannot write here.
      chownSync(dir, 0, gid);
      chmodSync(dir, 0o2750);
    }
    this.appDirs.set(app, dir);
    return dir;
  }

  /** Closes both sockets (after what is queued has gone out) and every transfer. */
  async close(): Promise<void> {
    this.fetcher.close();
    this.keeps.close();
    this.bulkRequests.failAll(new HearthError("the node cache closed"));
    this.service.close();
    await Promise.all([this.bulk.flush(), this.socket.flush()]);
    this.bulk.close();
    this.socket.close();
    this.stopGate?.();
    // A cache: what it held goes with it, and only that (a killed agent's is emptied when the next one starts on this dir).
    if (this.claim) releaseCacheDir(this.claim);
  }
}

/** A request's list of numbers (chunk sums); throws, naming them, when it is not one. */
function numbers(v: unknown): number[] {
  if (!Array.isArray(v) || !v.every((x) => typeof x === "number")) throw new HearthError("expected a list of numbers (the chunk sums)");
  return v as number[];
}

/**
 * An `obj-open` answer being made: large parts by path, small ones inline
 * up to OPEN_INLINE_BYTES in all, and the small ones past that in a read
 * transfer the executor pulls (`tid`, each such part `{pull: j}`: its index
 * in the transfer).
 */
class OpenReply {
  private readonly parts: Array<Record<string, unknown>> = [];
  private readonly frames: Buffer[] = [];
  private readonly pulled: Array<() => PartSource> = [];
  private inlined = 0;

  file(meta: Record<string, unknown>, file: string, pending?: number): void {
    this.parts.push({ ...meta, file, ...(pending === undefined ? {} : { pending }) });
  }

  small(meta: Record<string, unknown>, data: Buffer, source: () => PartSource): void {
    if (this.inlined + data.byteLength <= OPEN_INLINE_BYTES) {
      this.inlined += data.byteLength;
      this.frames.push(data);
      this.parts.push({ ...meta, inline: this.frames.length - 1 });
    } else {
      this.pulled.push(source);
      this.parts.push({ ...meta, pull: this.pulled.length - 1 });
    }
  }

  answer(service: ObjectService, app: string, head: { mode: string; version: number; baseVersion: number }, object?: StoredObject): { value: unknown; frames: Buffer[] } {
    const tid = this.pulled.length > 0 ? service.openRead(app, this.pulled.map((f) => f()), object) : undefined;
    return { value: { ...head, parts: this.parts, ...(tid === undefined ? {} : { tid }) }, frames: this.frames };
  }
}
