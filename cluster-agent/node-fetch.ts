/**
 * How a node cache brings its copy of an object up to date: one fetch per
 * object at a time (concurrent readers share it), from the head, or the
 * base from the node the head names as holding or receiving it (the head's
 * `peer` answer, from its distribution tree: it sends a base once, and
 * nodes pass it on) with only the patches from the head.
 * Large parts are written to their files as chunks arrive, and other nodes
 * may read them meanwhile (receiving.ts). A peer that fails or stalls is
 * left for the head with the chunks already written kept: the fetch resumes
 * where it was, never silently short. The copy is installed only when whole.
 * Copies ahead of a commit are node-precopy.ts's; peer connections node-peers.ts's.
 */
import { HearthError, ObjectNotFoundError } from "../sdk/errors/index.js";
import { ackSoon, noteRead, pullChunks, requestAcking, type PartMeta } from "../sdk/cache/transfer.js";
import { isFilePart } from "./head/object-store.js";
import type { ObjectService } from "./object-service.js";
import { storedSource } from "./part-source.js";
import { ReceivingPart, meta, sameParts, sameSums, tallied } from "./receiving.js";
import { removeKept, type KeptPart } from "./node-keep.js";
import { MAX_PEER_TRIES, PEER_STALL_MS, PeerLinks, type PeerHint } from "./node-peers.js";
import { NodePrecopies, type PrecopyOptions } from "./node-precopy.js";

/** What a node's fetches did (status and tests read these). */
export interface FetchCounters {
  /** Fetches started (one per miss or freshness check that found no fetch in flight). */
  started: number;
  /** Gets that found a fetch of their object in flight and waited for it instead. */
  joined: number;
  /** Copies (or parts of copies) pulled from the head, and from other nodes. */
  fromHead: number;
  fromPeers: number;
  /** Peers that failed mid-copy (the head then served the rest). */
  peerFailures: number;
  bytesFromHead: number;
  bytesFromPeers: number;
  /** Copies this node served to other nodes. */
  servedToPeers: number;
  /** Copies installed from the files a writer on this node uploaded (node-keep.ts), and their bytes: nothing of them was fetched. */
  kept: number;
  bytesKept: number;
  /** Parts of base uploads copied before their commit (their bytes are in bytesFromHead/bytesFromPeers), and copies installed from them. */
  precopiedParts: number;
  precopied: number;
  /** Pre-copies that were not installed (the upload was dropped, its notices missed, or the object moved on): their bytes went. */
  precopiesDropped: number;
}

/** A copy this node installed. */
export interface RecentFetch {
  key: string;
  version: number;
  mode: string;
  bytes: number;
  /** "head", "peer" (another node; "peer+head" when the head served the rest), "inline", "kept" (a writer's files on this node), or "precopy" (parts copied while they uploaded). */
  source: string;
  startedAt: number;
  doneAt: number;
}

/** How many installed copies `recent` keeps. */
const RECENT_KEPT = 64;

/** A copy being received, as other nodes (and, at its final files, this node's executors) may read it. */
export interface Receiving {
  mode: "patches" | "full";
  version: number;
  baseVersion: number;
  metas: PartMeta[];
  parts: ReceivingPart[];
  /** Its parts are written where they will stay (the store installs them in place), so readers may follow them by path. */
  inPlace: boolean;
  /** Where its bytes come from now: "head", or "peer <agent id>". */
  source: string;
}

/** What a fetcher needs from its node cache (a copy ahead's needs, and the agent's secret its peer connections sign with). */
export interface NodeFetcherOptions extends PrecopyOptions {
  secret: Buffer;
}

/** A node cache's fetches. */
export class NodeFetcher {
  private readonly inFlight = new Map<string, Promise<void>>();
  private readonly receiving = new Map<string, Receiving>();
  /** Fetches in flight: resolved with their copy as soon as the head answered (undefined: nothing large to receive). */
  private readonly answered = new Map<string, Promise<Receiving | undefined>>();
  private readonly peers: PeerLinks;
  /** Copies ahead of a commit (node-precopy.ts). */
  readonly precopies: NodePrecopies;
  readonly counters: FetchCounters = { started: 0, joined: 0, fromHead: 0, fromPeers: 0, peerFailures: 0, bytesFromHead: 0, bytesFromPeers: 0, servedToPeers: 0, kept: 0, bytesKept: 0, precopiedParts: 0, precopied: 0, precopiesDropped: 0 };
  /** The last copies installed (newest last): what, from where, and when (ms since the epoch). */
  readonly recent: RecentFetch[] = [];

  constructor(private readonly opts: NodeFetcherOptions) {
    this.peers = new PeerLinks(opts.agentId, opts.secret, opts.log);
    this.precopies = new NodePrecopies(opts, {
      counters: this.counters,
      peers: this.peers,
      refresh: (app, key) => this.refresh(app, key),
      installed: async (app, key, c) => {
        this.noteInstalled({ key, version: c.version, mode: "full", bytes: c.bytes, source: "precopy", startedAt: c.startedAt, doneAt: Date.now() });
        await this.announceHeld(app, key, c.version, c.baseVersion);
      },
    });
  }

  /** Records an installed copy in `recent`. */
  private noteInstalled(r: RecentFetch): void {
    this.recent.push(r);
    if (this.recent.length > RECENT_KEPT) this.recent.shift();
  }

  /** Brings the local copy of `app/key` to the head's latest version; concurrent callers share one fetch. */
  refresh(app: string, key: string): Promise<void> {
    const full = `${app}/${key}`;
    const running = this.inFlight.get(full);
    if (running) {
      this.counters.joined++;
      return running;
    }
    this.counters.started++;
    let announce!: (c: Receiving | undefined) => void;
    this.answered.set(full, new Promise((r) => (announce = r)));
    const p = this.fetch(app, key, announce).finally(() => {
      announce(undefined);
      this.inFlight.delete(full);
      this.answered.delete(full);
    });
    this.inFlight.set(full, p);
    return p;
  }

  /**
   * Starts (or joins) bringing `app/key` up to date and resolves as soon as
   * the head answered: with the copy being received when its parts are
   * written in place (readers may follow each part as it completes), else
   * once the fetch is over (undefined: read the store).
   */
  async follow(app: string, key: string): Promise<Receiving | undefined> {
    const done = this.refresh(app, key);
    const copy = await Promise.race([this.answered.get(`${app}/${key}`) ?? Promise.resolve(undefined), done.then(() => undefined)]);
    if (copy?.inPlace) return copy;
    await done;
    return undefined;
  }

  /** The copy of `app/key` at `version` being received in place, if any. */
  receivingAt(app: string, key: string, version: number): Receiving | undefined {
    const c = this.receiving.get(`${app}/${key}`);
    return c && c.version === version && c.inPlace ? c : undefined;
  }

  /**
   * Another node asks for the base `baseVersion` of `app/key` (its first
   * `baseParts` parts) at `version`: a read transfer over this node's copy
   * of that base, installed (at any version on it: patches do not change the
   * base) or still being received (its reads wait for chunks in flight).
   * When this node's copy is at `version` itself, the transfer covers every
   * part, patches included (the asking node then needs nothing from the
   * head); else the base's parts only. Anything else is not held here.
   */
  servePeer(service: ObjectService, app: string, key: string, baseVersion: number, baseParts: number, version?: number): unknown {
    const full = `${app}/${key}`;
    const stored = this.opts.store.peek(full);
    if (stored && stored.baseVersion === baseVersion && 1 + stored.more.length === baseParts) {
      const r = this.opts.store.read(full);
      if (r.mode !== "full") throw new HearthError(`copy of '${key}' read back as ${r.mode}`);
      const served = stored.version === version ? r.parts : r.parts.slice(0, baseParts);
      this.counters.servedToPeers++;
      return { baseVersion, version: stored.version, parts: served.map(meta), tid: service.openRead(app, served.map((p, i) => storedSource(this.opts.store, r.object, p, i)), r.object) };
    }
    const copy = this.receiving.get(full);
    if (copy && copy.baseVersion === baseVersion && copy.mode === "full" && copy.metas.filter((m) => m.version === baseVersion).length === baseParts) {
      const n = copy.version === version ? copy.metas.length : baseParts;
      this.counters.servedToPeers++;
      return { baseVersion, version: copy.version, parts: copy.metas.slice(0, n), tid: service.openRead(app, copy.parts.slice(0, n).map((p) => p.source())) };
    }
    throw new ObjectNotFoundError(`agent ${this.opts.agentId} holds no copy of the base of '${key}' at version ${baseVersion}`, { key, app });
  }

  /**
   * Installs the files a writer on this node uploaded (node-keep.ts) as this
   * node's copy of `app/key` at `version`, a base of `kept` parts, once the
   * head's parts and sums at that version are exactly theirs and every file
   * passed its check: no byte of it moves from the head or a peer. The head
   * is then told this node holds the base, so other nodes may copy it from
   * here. It takes the object's fetch slot (a get meanwhile waits for it).
   * Resolves with why nothing was installed (the files are removed), or
   * undefined.
   */
  async adopt(app: string, key: string, version: number, baseVersion: number, kept: KeptPart[]): Promise<string | undefined> {
    const full = `${app}/${key}`;
    if (this.inFlight.has(full)) {
      for (const p of kept) removeKept(p);
      return "a fetch of it is under way";
    }
    let why: string | undefined;
    this.answered.set(full, Promise.resolve(undefined));
    const p = this.install(app, key, version, baseVersion, kept)
      .then(
        (w) => void (why = w),
        (err: unknown) => void (why = `it could not be installed: ${(err as Error).message}`),
      )
      .finally(() => {
        this.inFlight.delete(full);
        this.answered.delete(full);
      });
    this.inFlight.set(full, p);
    await p;
    return why;
  }

  private async install(app: string, key: string, version: number, baseVersion: number, kept: KeptPart[]): Promise<string | undefined> {
    const full = `${app}/${key}`;
    const control = this.opts.control;
    const startedAt = Date.now();
    let installed = false;
    try {
      for (const [i, p] of kept.entries()) {
        const failed = await p.checked.then(() => undefined, (err: unknown) => (err as Error).message);
        if (failed) return `part ${i}: ${failed}`;
      }
      // The head's parts at this version, with their sums (what it is, no data).
      const { value: head } = await control.request<{ mode: string; version: number; baseVersion: number; parts?: PartMeta[] }>("obj-get", { app, key, meta: true });
      const metas = (head.parts ?? []) as PartMeta[];
      if (head.mode !== "full" || head.version !== version || head.baseVersion !== baseVersion) return `the head holds version ${head.version} now, not ${version}`;
      const same = metas.length === kept.length && metas.every((m, i) => m.version === baseVersion && m.size === kept[i]!.size && sameSums(m.sums, kept[i]!.sums));
      if (!same) return `the head's ${metas.length} part(s) at version ${version} are not the ${kept.length} kept here`;
      this.opts.store.replicate(full, {
        mode: "full",
        version,
        baseVersion,
        parts: metas.map((m, i) => {
          const k = kept[i]!;
          return k.file !== undefined ? { ...meta(m), file: k.file } : { ...meta(m), data: k.data ?? Buffer.alloc(0) };
        }),
      });
      installed = true;
      const bytes = metas.reduce((n, m) => n + m.size, 0);
      this.counters.kept++;
      this.counters.bytesKept += bytes;
      this.noteInstalled({ key, version, mode: "full", bytes, source: "kept", startedAt, doneAt: Date.now() });
      await this.announceHeld(app, key, version, baseVersion);
      return undefined;
    } finally {
      if (!installed) for (const p of kept) removeKept(p);
    }
  }

  /** Tells the head this node holds `version` of `app/key` (a get that has it): it adds the node to the base's tree. */
  private async announceHeld(app: string, key: string, version: number, baseVersion: number): Promise<void> {
    const control = this.opts.control;
    const { value: again } = await requestAcking(control, "obj-get", { app, key, have: version, haveBase: baseVersion });
    noteRead(control, again);
    if (again.tid !== undefined) await requestAcking(control, "obj-done", { tid: again.tid, app }).catch(() => undefined);
    ackSoon(control);
  }

  /** The copies being received now, with the bytes each has (status and tests watch a copy move). */
  get inProgress(): Array<{ key: string; version: number; bytes: number; written: number; source: string }> {
    return [...this.receiving.entries()].map(([full, c]) => ({ key: full.slice(full.indexOf("/") + 1), version: c.version, bytes: c.metas.reduce((n, m) => n + m.size, 0), written: written(c), source: c.source }));
  }

  private async fetch(app: string, key: string, announce: (c: Receiving | undefined) => void): Promise<void> {
    const full = `${app}/${key}`;
    const store = this.opts.store;
    const startedAt = Date.now();
    // Parts copied while the upload ran: installed when the commit is exactly them, else they went and the object is fetched.
    const why = await this.precopies.install(app, key, startedAt);
    if (why === "installed" || why === "unchanged") return;
    if (why !== undefined) this.opts.log(`node cache: the copy ahead of '${full}' is not used (${why}); fetching it`);
    const held = store.peek(full);
    const { value: head, frames } = await requestAcking(this.opts.control, "obj-get", { app, key, have: held?.version, haveBase: held?.baseVersion, peers: true });
    noteRead(this.opts.control, head);
    if (head.mode === "not-modified") return ackSoon(this.opts.control);
    const metas = head.parts as PartMeta[];
    const what = { key, app };
    const fileBytes = metas.filter((m) => isFilePart(m.size)).reduce((n, m) => n + m.size, 0);
    // Room first (the least recently used copies go): a copy that cannot fit fails before a byte moves.
    if (fileBytes > 0 && store.poolFor(fileBytes) === "file") store.makeRoom(fileBytes, full, head.mode === "full" ? store.freedBy("update", full, "file") : 0, "file");
    const parts: ReceivingPart[] = [];
    // Large parts are written where they will stay when nothing there is in use, so this node's executors can follow them.
    const placed = fileBytes > 0 ? store.freeReplicaFiles(full, head) : undefined;
    const copy: Receiving = { mode: head.mode, version: head.version, baseVersion: head.baseVersion, metas, parts, inPlace: placed !== undefined, source: head.peer ? `peer ${(head.peer as { agentId: string }).agentId}` : "head" };
    let source = "head";
    try {
      for (const [i, m] of metas.entries()) parts.push(new ReceivingPart(m, isFilePart(m.size) ? (placed?.[i] ?? store.receivingFile(full)) : undefined, this.opts.fileMode(app), what, i));
      if (fileBytes > 0) this.receiving.set(full, copy);
      announce(fileBytes > 0 ? copy : undefined);
      if (head.tid === undefined && head.peer === undefined) {
        for (const [i, p] of parts.entries()) if (frames[i]?.byteLength) await p.write(frames[i]!, 0);
        ackSoon(this.opts.control);
        source = "inline";
      } else if (head.peer !== undefined) {
        source = (await this.fromPeers(app, key, copy, head.tid as number, head.peer as PeerHint, head.peerParts as number)) ? "peer" : "peer+head";
      } else {
        this.counters.fromHead++;
        this.counters.bytesFromHead += await pullChunks(this.opts.bulk, head.tid as number, metas, parts, { app, key });
      }
      for (const p of parts) p.end();
      store.replicate(full, {
        mode: head.mode,
        version: head.version,
        baseVersion: head.baseVersion,
        parts: parts.map((p) => (p.file ? { ...meta(p.meta), file: p.file } : { ...meta(p.meta), data: p.data! })),
      });
      for (const p of parts) p.done(false);
      this.noteInstalled({ key, version: head.version, mode: head.mode, bytes: metas.reduce((n, m) => n + m.size, 0), source, startedAt, doneAt: Date.now() });
    } catch (err) {
      for (const p of parts) p.abort(err);
      throw err;
    } finally {
      if (this.receiving.get(full) === copy) this.receiving.delete(full);
    }
  }

  /**
   * The base from the node the head named, and the rest (patches) from that
   * node too when it holds this very version, else from the head's transfer
   * `tid`, side by side. A peer that fails, or stalls past PEER_STALL_MS on
   * a chunk, is reported to the head, which names another (never one below
   * this node) or, after MAX_PEER_TRIES, serves the rest itself; the chunks
   * already written are kept and never pulled again. Returns true when no
   * byte of the base came from the head. A version that moved on meanwhile
   * fails this fetch (the next get starts afresh).
   */
  private async fromPeers(app: string, key: string, copy: Receiving, tid: number, first: PeerHint, baseParts: number): Promise<boolean> {
    const { metas, parts } = copy;
    const held = (part: number, offset: number): boolean => parts[part]!.holds(offset);
    const isBase = (part: number): boolean => part < baseParts;
    // What each source wrote, chunk by chunk (a chunk two sources sent is counted once, for the one that wrote it).
    const fromHead = { bytes: 0 };
    const fromPeers = { bytes: 0 };
    // A head transfer opened for this copy and not pulled from yet (ended unused when peers serve everything).
    let headTid: number | undefined = tid;
    const release = async (): Promise<void> => {
      if (headTid === undefined) return;
      const t = headTid;
      headTid = undefined;
      await requestAcking(this.opts.bulk, "obj-done", { tid: t, app }).catch(() => undefined);
    };
    // The patches from the head, once a peer said it has only the base (small beside the base).
    let patches: Promise<number> | undefined;
    const patchesFromHead = (): void => {
      if (patches !== undefined || headTid === undefined || metas.length === baseParts) return;
      const t = headTid;
      headTid = undefined;
      patches = pullChunks(this.opts.bulk, t, metas, tallied(parts, fromHead), { app, key, skip: (p, o) => isBase(p) || held(p, o) });
      patches.catch(() => undefined); // awaited below
    };
    try {
      let peer: PeerHint | undefined = first;
      for (let tries = 1; peer; tries++) {
        try {
          copy.source = `peer ${peer.agentId}`;
          await this.fromPeer(app, key, copy, peer, baseParts, fromPeers, patchesFromHead, () => patches !== undefined);
          this.counters.fromPeers++;
          return true;
        } catch (err) {
          this.counters.peerFailures++;
          this.opts.log(`copy of '${app}/${key}' v${copy.version} from agent ${peer.agentId} (${peer.endpoint}) failed with ${written(copy, isBase)} bytes of the base here: ${(err as Error).message}; ${tries < MAX_PEER_TRIES ? "asking the head for another node" : "the head serves the rest"}`);
        }
        // The head drops the failed node from the base's tree and names another (or, past the tries, none).
        const { value: again } = await requestAcking(this.opts.control, "obj-get", { app, key, peers: tries < MAX_PEER_TRIES, failedPeer: peer.agentId });
        noteRead(this.opts.control, again);
        if (again.version !== copy.version || again.tid === undefined || !sameParts(again.parts as PartMeta[], metas)) {
          if (again.tid !== undefined) await requestAcking(this.opts.bulk, "obj-done", { tid: again.tid, app }).catch(() => undefined);
          throw new HearthError(`'${key}' moved on from version ${copy.version} to ${again.version} while this node was copying it; get it again`);
        }
        // The newest head transfer is the one kept for the patches (an older unused one ends).
        await release();
        peer = again.peer as PeerHint | undefined;
        if (peer) {
          if (patches === undefined) headTid = again.tid as number;
          else await requestAcking(this.opts.bulk, "obj-done", { tid: again.tid, app }).catch(() => undefined);
          continue;
        }
        copy.source = "head";
        this.counters.fromHead++;
        // Everything still missing, but patches a running pull brings.
        await pullChunks(this.opts.bulk, again.tid as number, metas, tallied(parts, fromHead), { app, key, skip: (p, o) => held(p, o) || (patches !== undefined && !isBase(p)) });
      }
      return false;
    } finally {
      try {
        await release();
        await patches;
      } finally {
        this.counters.bytesFromHead += fromHead.bytes;
        this.counters.bytesFromPeers += fromPeers.bytes;
      }
    }
  }

  /**
   * Pulls from `peer` what it serves of this copy and this node lacks: the
   * base's parts, or every part when it holds this version (`onAnswer` is
   * told which, before a chunk moves, so the head can bring the patches
   * meanwhile; `headBringsPatches` then keeps them off this pull). Each
   * chunk request is bounded by PEER_STALL_MS.
   */
  private async fromPeer(app: string, key: string, copy: Receiving, peer: PeerHint, baseParts: number, tally: { bytes: number }, onBaseOnly: () => void, headBringsPatches: () => boolean): Promise<void> {
    const link = this.peers.link(peer.endpoint);
    const { value: r } = await requestAcking(link.requests, "obj-get", { app, key, baseVersion: copy.baseVersion, baseParts, version: copy.version }, PEER_STALL_MS);
    noteRead(link.requests, r);
    const served = Array.isArray(r.parts) ? r.parts.length : 0;
    if (r.baseVersion !== copy.baseVersion || (served !== baseParts && served !== copy.metas.length) || !sameParts(r.parts as PartMeta[], copy.metas.slice(0, served))) {
      throw new HearthError(`agent ${peer.agentId} answered base ${r.baseVersion} of '${key}' with ${served} parts, not base ${copy.baseVersion} (${baseParts} parts) or version ${copy.version}`);
    }
    if (served < copy.metas.length) onBaseOnly();
    const skip = (p: number, o: number): boolean => copy.parts[p]!.holds(o) || (p >= baseParts && headBringsPatches());
    await pullChunks(link.requests, r.tid as number, copy.metas.slice(0, served), tallied(copy.parts.slice(0, served), tally), { app, key, skip, timeoutMs: PEER_STALL_MS });
  }

  /** Closes peer connections unused for a while, and drops pre-copies idle for long (an upload that never committed). */
  sweep(now: number): void {
    this.precopies.sweep(now, (full) => this.inFlight.has(full));
    this.peers.sweep(now);
  }

  /** Ends every peer connection and fails what is being received. */
  close(): void {
    this.peers.close();
    this.precopies.close();
    for (const c of this.receiving.values()) for (const p of c.parts) p.abort(new HearthError("the node cache closed"));
  }
}

/** Bytes of `c` written so far (of the parts `which` picks). */
function written(c: Receiving, which: (part: number) => boolean = () => true): number {
  return c.parts.reduce((n, p, i) => n + (which(i) ? p.written : 0), 0);
}
