/**
 * A node cache's copies ahead of a commit: while a writer uploads a new base
 * of an object this node holds, the head tells every node as each large
 * part is whole there (obj-sealed), and this node copies the part, from the
 * head or a node of that part's tree, into a receiving file its executors
 * never see. At the commit (or the next read) the copy is installed when the
 * head's parts and sums are exactly the ones copied (a part whose notice
 * never came is copied then from the committed object); a dropped upload, a
 * different commit or PRECOPY_TTL_MS idle discards it. A copy ahead never
 * evicts anything: without room free, the part is fetched when read.
 */
import { HearthError, ObjectNotFoundError } from "../sdk/errors/index.js";
import type { Requester } from "../sdk/wire/requests.js";
import { noteRead, pullChunks, requestAcking, type PartMeta } from "../sdk/cache/transfer.js";
import { isFilePart, type ObjectStore } from "./head/object-store.js";
import type { ObjectService } from "./object-service.js";
import type { SealNotice } from "./seal-notice.js";
import { ReceivingPart, meta, sameSums, tallied } from "./receiving.js";
import { MAX_PEER_TRIES, PEER_STALL_MS, type PeerHint, type PeerLinks } from "./node-peers.js";

/** One sealed part of a base upload, copied before the commit. */
interface PrecopyPart {
  part: ReceivingPart;
  /** Settles true once every byte is here and checked, false when the copy failed. */
  copied: Promise<boolean>;
}

/** A base upload of an object this node holds, copied part by part as the head has each whole. */
interface Precopy {
  upload: number;
  parts: Map<number, PrecopyPart>;
  installed: boolean;
  lastActive: number;
}

/** A pre-copy idle this long (its upload never committed, or nobody read it) goes. */
const PRECOPY_TTL_MS = 120_000;

/** What a node's copies ahead need of its cache. */
export interface PrecopyOptions {
  store: ObjectStore;
  /** The agent's own head connection (gets: the head's answers). */
  control: Requester;
  /** The bulk head connection (chunks). */
  bulk: Requester;
  agentId: string;
  /** Mode of an app's part files. */
  fileMode: (app: string) => number;
  log: (line: string) => void;
}

/** The fetch counters copies ahead add to. */
export interface PrecopyCounters {
  peerFailures: number;
  bytesFromHead: number;
  bytesFromPeers: number;
  servedToPeers: number;
  precopiedParts: number;
  precopied: number;
  precopiesDropped: number;
}

/** The rest of the node cache a copy ahead works with. */
export interface PrecopyHost {
  counters: PrecopyCounters;
  peers: PeerLinks;
  /** Brings `app/key` up to date (at the commit: installs the copy). */
  refresh(app: string, key: string): Promise<void>;
  /** Records an installed copy and tells the head this node holds it. */
  installed(app: string, key: string, c: { version: number; baseVersion: number; bytes: number; startedAt: number }): Promise<void>;
}

/** The copies ahead of one node cache, by `app/key`. */
export class NodePrecopies {
  private readonly precopies = new Map<string, Precopy>();

  constructor(
    private readonly opts: PrecopyOptions,
    private readonly host: PrecopyHost,
  ) {}

  /**
   * Another node copies part `index` of upload `upload` of `app/key` before
   * the commit, from this node's copy of it (a read waits for chunks in
   * flight).
   */
  serve(service: ObjectService, app: string, key: string, upload: number, index: number): unknown {
    const pre = this.precopies.get(`${app}/${key}`);
    const p = pre?.upload === upload ? pre.parts.get(index) : undefined;
    if (!pre || !p) throw new ObjectNotFoundError(`agent ${this.opts.agentId} holds no copy of part ${index} of upload ${upload} of '${key}'`, { key, app });
    pre.lastActive = Date.now();
    this.host.counters.servedToPeers++;
    return { parts: [p.part.meta], tid: service.openRead(app, [p.part.source()]) };
  }

  /**
   * The head says of a base upload of `app/key` (obj-sealed): a part is
   * whole there (copied now, when this node holds the object and has room
   * for it), it committed (the parts are installed now), or it was dropped
   * (they go).
   */
  notice(app: string, n: SealNotice): void {
    const full = `${app}/${n.key}`;
    const pre = this.precopies.get(full);
    if (n.dropped === true || n.committed !== undefined) {
      if (pre?.upload !== n.upload) return;
      if (n.dropped === true) this.drop(full);
      else this.host.refresh(app, n.key).catch((err: unknown) => this.opts.log(`copy of '${full}' v${n.committed} at its commit failed: ${(err as Error).message}`));
      return;
    }
    // Only objects this node's executors read are copied ahead; an older upload's late notice is ignored.
    const held = this.opts.store.peek(full);
    if (!held || (pre && pre.upload > n.upload) || !isFilePart(n.size)) return;
    if (pre && pre.upload !== n.upload) this.drop(full);
    const into = this.precopies.get(full) ?? { upload: n.upload, parts: new Map(), installed: false, lastActive: Date.now() };
    this.precopies.set(full, into);
    if (into.parts.has(n.part)) return;
    // Only into room the cache has free: a copy ahead never evicts what executors read (the read fetches it then).
    const u = this.opts.store.usage();
    if (u.fileLimit !== null && u.fileUsed + n.size > u.fileLimit) {
      this.opts.log(`node cache: part ${n.part} of the upload of '${full}' (${n.size} bytes) is not copied ahead: the cache has ${u.fileLimit - u.fileUsed} bytes free; it is fetched when read`);
      return;
    }
    this.startPart(app, n.key, into, n.part, { kind: n.kind, dtype: n.dtype, size: n.size, version: 0, sums: n.sums });
  }

  /** Bytes of copied files not installed (the cache counts them against its file limit). */
  get bytes(): number {
    let n = 0;
    for (const pre of this.precopies.values()) if (!pre.installed) for (const p of pre.parts.values()) n += p.part.meta.size;
    return n;
  }

  /**
   * At a fetch of `app/key`: installs its copy ahead when the head's parts
   * are exactly the copied ones. Resolves undefined when there is none (or
   * it was installed earlier), "installed", "unchanged" (the head still
   * holds the version this node has: the upload has not committed, and a
   * read meanwhile gets that version), or, having dropped it, why it was
   * not used.
   */
  async install(app: string, key: string, startedAt: number): Promise<string | undefined> {
    const full = `${app}/${key}`;
    const pre = this.precopies.get(full);
    if (!pre || pre.installed) return undefined;
    const why = await this.installParts(app, key, pre, startedAt).catch((err: unknown) => `it could not be installed: ${(err as Error).message}`);
    if (why !== "installed" && why !== "unchanged") this.drop(full);
    return why;
  }

  /** Drops copies idle past PRECOPY_TTL_MS whose object no fetch is bringing (`busy`). */
  sweep(now: number, busy: (full: string) => boolean): void {
    for (const [full, pre] of this.precopies) if (now - pre.lastActive > PRECOPY_TTL_MS && !busy(full)) this.drop(full);
  }

  /** Drops every copy ahead. */
  close(): void {
    for (const full of [...this.precopies.keys()]) this.drop(full);
  }

  private startPart(app: string, key: string, pre: Precopy, index: number, m: PartMeta): void {
    const full = `${app}/${key}`;
    let part: ReceivingPart;
    try {
      part = new ReceivingPart(m, this.opts.store.receivingFile(full), this.opts.fileMode(app), { key, app }, index);
    } catch (err) {
      this.opts.log(`node cache: part ${index} of the upload of '${full}' is not copied ahead: ${(err as Error).message}`);
      return;
    }
    const copied = this.copyPart(app, key, pre.upload, index, part).then(
      () => {
        part.end();
        part.dropRecent();
        this.host.counters.precopiedParts++;
        return true;
      },
      (err: unknown) => {
        this.opts.log(`node cache: copying part ${index} of the upload of '${full}' ahead failed: ${(err as Error).message}; it is fetched when read`);
        part.abort(err);
        return false;
      },
    );
    pre.parts.set(index, { part, copied });
  }

  /**
   * Copies one sealed part from the node the head names (its part's tree)
   * or from the head; a peer that fails is reported and the head names
   * another, or serves it (the chunks written stay).
   */
  private async copyPart(app: string, key: string, upload: number, index: number, part: ReceivingPart): Promise<void> {
    const fromHead = { bytes: 0 };
    const fromPeers = { bytes: 0 };
    const skip = (_p: number, offset: number): boolean => part.holds(offset);
    const counters = this.host.counters;
    let failedPeer: string | undefined;
    try {
      for (let tries = 1; ; tries++) {
        const { value: r } = await requestAcking(this.opts.control, "obj-get", { app, key, upload, part: index, peers: tries <= MAX_PEER_TRIES, ...(failedPeer ? { failedPeer } : {}) });
        noteRead(this.opts.control, r);
        const given = (r.parts as PartMeta[] | undefined)?.[0];
        if (!given || given.size !== part.meta.size || !sameSums(given.sums, part.meta.sums ?? [])) {
          if (r.tid !== undefined) await requestAcking(this.opts.bulk, "obj-done", { tid: r.tid, app }).catch(() => undefined);
          throw new HearthError(`the head's part ${index} of upload ${upload} is not the one it announced`);
        }
        const peer = r.peer as PeerHint | undefined;
        if (!peer) {
          await pullChunks(this.opts.bulk, r.tid as number, [part.meta], tallied([part], fromHead), { app, key, skip });
          return;
        }
        try {
          const link = this.host.peers.link(peer.endpoint);
          const { value: pr } = await requestAcking(link.requests, "obj-get", { app, key, upload, part: index }, PEER_STALL_MS);
          noteRead(link.requests, pr);
          await pullChunks(link.requests, pr.tid as number, [part.meta], tallied([part], fromPeers), { app, key, skip, timeoutMs: PEER_STALL_MS });
          return;
        } catch (err) {
          counters.peerFailures++;
          failedPeer = peer.agentId;
          this.opts.log(`copy ahead of part ${index} of '${app}/${key}' from agent ${peer.agentId} failed with ${part.written} bytes here: ${(err as Error).message}; asking the head`);
        }
      }
    } finally {
      counters.bytesFromHead += fromHead.bytes;
      counters.bytesFromPeers += fromPeers.bytes;
    }
  }

  /** Installs `pre` as the committed version of `app/key` when the head's parts are exactly its parts (a part whose notice did not come, like the last one, sealed just before the commit, is copied now from the committed object). */
  private async installParts(app: string, key: string, pre: Precopy, startedAt: number): Promise<string> {
    const full = `${app}/${key}`;
    const { value: head } = await this.opts.control.request<{ mode: string; version: number; baseVersion: number; parts?: PartMeta[] }>("obj-get", { app, key, meta: true });
    if (this.opts.store.peek(full)?.version === head.version) return "unchanged";
    const metas = head.parts ?? [];
    if (head.mode !== "full" || metas.length === 0) return `the head answered ${head.mode}`;
    if (metas.some((m) => !isFilePart(m.size))) return "it has parts too small to copy ahead";
    pre.lastActive = Date.now();
    for (const [i, m] of metas.entries()) if (!pre.parts.has(i)) this.startPart(app, key, pre, i, { ...meta(m), version: 0 });
    for (const i of pre.parts.keys()) if (i >= metas.length) return `the head's version ${head.version} has ${metas.length} parts, not part ${i}`;
    for (const [i, m] of metas.entries()) {
      const p = pre.parts.get(i);
      if (!p || !(await p.copied)) return `part ${i} was not copied`;
      if (m.size !== p.part.meta.size || m.kind !== p.part.meta.kind || !sameSums(m.sums, p.part.meta.sums ?? [])) return `the head's version ${head.version} is not the upload copied (part ${i} differs)`;
    }
    this.opts.store.replicate(full, { mode: "full", version: head.version, baseVersion: head.baseVersion, parts: metas.map((m, i) => ({ ...meta(m), file: pre.parts.get(i)!.part.file! })) });
    pre.installed = true;
    this.host.counters.precopied++;
    await this.host.installed(app, key, { version: head.version, baseVersion: head.baseVersion, bytes: metas.reduce((n, m) => n + m.size, 0), startedAt });
    return "installed";
  }

  /** Drops the copy ahead of `full`: its files go unless they were installed (readers still open keep theirs until they are done). */
  private drop(full: string): void {
    const pre = this.precopies.get(full);
    if (!pre) return;
    this.precopies.delete(full);
    if (!pre.installed) this.host.counters.precopiesDropped++;
    for (const p of pre.parts.values()) {
      if (pre.installed) p.part.done(false);
      else p.part.abort(new HearthError(`the copy ahead of '${full}' was dropped`));
    }
  }
}
