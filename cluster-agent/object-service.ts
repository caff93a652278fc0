/**
 * The server side of the object protocol (`obj-*` requests), shared by the
 * head (the authoritative store) and agents (node caches). It answers
 * incremental gets inline or through pulled chunks, and accepts inline or
 * chunked writes.
 *
 * Large parts never sit in memory whole: an upload's chunks are written to
 * the part's file as they arrive (at their offsets, so a window of chunks in
 * flight may land in any order) and the commit renames the file into place;
 * a read transfer keeps a descriptor of each large part's file and reads
 * each chunk from it when it is asked for, after its connection's read
 * credit admitted it (so a slow reader holds no copies here). A transfer's
 * parts are `PartSource`s, so a node cache can also serve a copy it is still
 * receiving (pass-through, node-cache.ts).
 */
import { randomUUID } from "node:crypto";
import { closeSync, rmSync } from "node:fs";
import { chunkSum, writeAll } from "../sdk/cache/file-io.js";
import { CHUNK, INLINE_LIMIT, type PartMeta } from "../sdk/cache/transfer.js";
import type { DType, ValueKind } from "../sdk/cache/values.js";
import { num, optNum, optStr, str, type Header } from "../sdk/wire/codec.js";
import { HearthError, ObjectNotFoundError } from "../sdk/errors/index.js";
import { ProtocolError } from "../sdk/wire/errors.js";
import { allParts, isFilePart, objectIds, storageError, userKey, type ObjectStore, type StoredObject, type StoredPart, type WriteOp } from "./head/object-store.js";
import { ReadCredit, type ReadCreditLimits } from "./read-credit.js";
import { DistributionTrees, HEAD } from "./head/distribution-tree.js";
import { checkedFileSource, storedSource, type PartSource } from "./part-source.js";
import { KINDS, type SealNotice } from "./seal-notice.js";
import { MAX_UPLOAD_PARTS, missingChunks, openUploadPart, receivedBytes, type WriteTransfer } from "./upload-transfer.js";

/** A reply: value plus payload frames. */
export interface ServiceReply {
  value: unknown;
  frames?: Buffer[];
}

interface ReadTransfer {
  /** The app namespace that opened it: only that app's peers may read or end it. */
  ns: string;
  parts: PartSource[];
  /** The stored object it reads (none for a node cache's pass-through of a copy it is receiving). */
  object?: StoredObject;
  lastActive: number;
}

/** Committed uploads remembered for the nodes still copying their sealed parts (their last part seals just before the commit). */
const COMMITTED_KEPT = 64;

const TRANSFER_TTL_MS = 120_000;

/** The agent a head request comes from, for pass-through between nodes (the head only). */
export interface RequestingAgent {
  id: string;
  /** Where another agent's node cache listens for other nodes, or undefined if it is gone. */
  endpointOf(agentId: string): string | undefined;
}


/** Byte counters of one service. */
export interface ObjectTraffic {
  bytesIn: number;
  bytesOut: number;
  /** Bytes sent, by peer kind ("driver", "agent", "executor"). */
  bytesOutTo: Record<string, number>;
  /** `meta`: gets that asked only what the object is (its parts and sums at its version), no data. */
  gets: { notModified: number; patches: number; full: number; meta: number };
  /** Full gets of large objects answered with another node to copy from instead of the bytes. */
  peerHints: number;
  /** Gets of one sealed part of a base upload, before (or just after) its commit: answered with the bytes or a peer. */
  uploadParts: number;
}

/** Handles `obj-*` requests against one store. */
export class ObjectService {
  private readonly reads = new Map<number, ReadTransfer>();
  private readonly writes = new Map<number, WriteTransfer>();
  /**
   * The head's record of which nodes hold or are receiving each large
   * object's base, as a tree of bounded fan-out: a node that needs the base
   * is sent to one of them (distribution-tree.ts), so the head sends a base once.
   */
  readonly trees: DistributionTrees;
  private nextTid = 1;
  /** Uploads that committed after nodes were told of their sealed parts, by upload id: the object and version they made. */
  private readonly committed = new Map<number, { key: string; version: number }>();
  readonly traffic: ObjectTraffic = { bytesIn: 0, bytesOut: 0, bytesOutTo: {}, gets: { notModified: 0, patches: 0, full: 0, meta: 0 }, peerHints: 0, uploadParts: 0 };

  /** How much object data each connection holds unread (read-credit.ts). */
  readonly credit: ReadCredit;

  /**
   * @param opts.onDropped told of every delete that removed objects (`prefix`
   * within app `ns`; "" when the app was released): the head passes it on to
   * the agents, whose node caches drop their copies.
   * @param opts.onSealed told of every sealed part of a base upload (and of
   * such an upload dropped): the head tells the agents but `origin` (the
   * uploading executor's), whose nodes may copy it before the commit.
   */
  constructor(
    readonly store: ObjectStore,
    private readonly opts: { readOnly?: boolean; credit?: Partial<ReadCreditLimits>; onDropped?: (ns: string, prefix: string) => void; onSealed?: (ns: string, notice: SealNotice, origin?: string) => void; fanout?: number } = {},
  ) {
    this.credit = new ReadCredit(opts.credit);
    this.trees = new DistributionTrees(opts.fanout);
  }

  /**
   * Answers one request from connection `conn` (its routing id) with flow
   * control: the acknowledgements it carries (`acks`) are taken first; a
   * reply with object data waits while `conn` holds more unread data than
   * its limit (a chunk is read from its file only once admitted), and
   * carries the token (`ack`) that acknowledges it.
   */
  async serve(op: string, ns: string, h: Header, frames: Buffer[], peer: string, conn: string, agent?: RequestingAgent, origin?: string): Promise<ServiceReply> {
    this.credit.acknowledge(conn, h.acks);
    if (op === "obj-ack") return { value: {} };
    if (op === "obj-read") {
      const { transfer, part, offset, length } = this.readRequest(ns, h);
      const ack = await this.credit.admit(conn, length);
      const chunk = await transfer.parts[part]!.read(offset, length);
      transfer.lastActive = Date.now();
      this.count(chunk.byteLength, peer);
      return { value: { ack }, frames: [chunk] };
    }
    const r = await this.handle(op, ns, h, frames, peer, agent, origin);
    let bytes = 0;
    for (const f of r.frames ?? []) bytes += f.byteLength;
    if (bytes === 0) return r;
    const ack = await this.credit.admit(conn, bytes);
    return { value: { ...(r.value as object), ack }, frames: r.frames };
  }

  /**
   * Answers one request (without read credit: tests and `serve`). `ns` is
   * the app namespace of the caller; `peer` names the caller's kind for the
   * traffic counters; `origin` the agent an executor caller runs on.
   */
  async handle(op: string, ns: string, h: Header, frames: Buffer[], peer: string, agent?: RequestingAgent, origin?: string): Promise<ServiceReply> {
    switch (op) {
      case "obj-get":
        return this.get(ns, h, peer, agent);
      case "obj-read": {
        const { transfer, part, offset, length } = this.readRequest(ns, h);
        const chunk = await transfer.parts[part]!.read(offset, length);
        this.count(chunk.byteLength, peer);
        return { value: {}, frames: [chunk] };
      }
      case "obj-done": {
        const tid = num(h, "tid");
        if (this.reads.get(tid)?.ns === ns) this.finishRead(tid);
        return { value: { done: true } };
      }
      case "obj-stat":
        return { value: { ...this.store.usage(), traffic: this.traffic, credit: { ...this.credit.stats } } };
    }
    if (this.opts.readOnly) throw new ProtocolError(`'${op}' is not served here: write objects through the head`);
    switch (op) {
      case "obj-write": {
        const w = this.parseWrite(ns, h);
        const data = frames[1];
        if (!data || data.byteLength !== w.size) throw new ProtocolError(`obj-write: expected one payload frame of ${w.size} bytes`);
        this.traffic.bytesIn += data.byteLength;
        return { value: this.result(await this.store.write(w.op, w.key, { kind: w.kind, dtype: w.dtype, data }, w)) };
      }
      case "obj-begin":
        return { value: this.begin(ns, h, origin) };
      case "obj-seal":
        return { value: this.seal(ns, h) };
      case "obj-chunk":
        return { value: await this.chunk(ns, h, frames[1]) };
      case "obj-commit":
        return { value: await this.commitUpload(ns, h) };
      case "obj-abort": {
        const tid = num(h, "tid");
        if (this.writes.get(tid)?.ns === ns) this.dropWrite(tid);
        return { value: { aborted: true } };
      }
      case "obj-delete": {
        const prefix = optStr(h, "prefix") ?? "";
        const deleted = this.store.delete(`${ns}/${prefix}`);
        this.trees.forget(`${ns}/${prefix}`);
        if (deleted > 0) this.opts.onDropped?.(ns, prefix);
        return { value: { deleted } };
      }
      default:
        throw new ProtocolError(`unknown object op '${op}'`);
    }
  }

  /**
   * App `ns` was released (closed, or its keep-alive ran out): its scratch
   * objects go (what its sessions made and no one documents), and node
   * caches drop every copy of its objects. Returns how many were deleted.
   */
  releaseApp(ns: string): number {
    const deleted = this.store.delete(`${ns}/`, { scratchOnly: true });
    this.trees.forget(`${ns}/`);
    this.opts.onDropped?.(ns, "");
    return deleted;
  }

  /**
   * Opens a read transfer over `parts` for app `ns` and returns its id: the
   * reader pulls chunks with `obj-read` and ends it with `obj-done` (or it
   * expires). The sources are closed when it ends.
   */
  openRead(ns: string, parts: PartSource[], object?: StoredObject): number {
    const tid = this.nextTid++;
    if (object) object.readers++;
    this.reads.set(tid, { ns, parts, object, lastActive: Date.now() });
    return tid;
  }

  private result(obj: StoredObject): unknown {
    return { key: obj.key.slice(obj.key.indexOf("/") + 1), version: obj.version, baseVersion: obj.baseVersion, size: totalSize(obj) };
  }

  private begin(ns: string, h: Header, origin?: string): unknown {
    const w = this.parseWrite(ns, h, true);
    this.store.check(w.op, w.key, w.ifVersion);
    // A new base counts the old one (and its patches) as freed: they go when it commits. Until then
    // the upload's file sits beside them, so nothing published is lost if the upload fails.
    if (w.size !== undefined) {
      const pool = this.store.poolFor(w.size);
      if (pool) this.store.makeRoom(w.size, w.key, this.store.freedBy(w.op, w.key, pool), pool);
    }
    const tid = this.nextTid++;
    this.writes.set(tid, { ...w, ns, parts: new Map(), writing: new Set(), lastActive: Date.now(), origin });
    return { tid, chunk: CHUNK };
  }

  /**
   * The uploader says part `part` is whole at `size` bytes (every chunk
   * arrived): of a base with file parts, the agents hear of it (onSealed),
   * and nodes that hold the object may copy it before the commit.
   */
  private seal(ns: string, h: Header): unknown {
    const tid = num(h, "tid");
    const t = this.writeTransfer(ns, tid);
    const index = num(h, "part");
    const size = num(h, "size");
    const part = t.parts.get(index);
    const missing = part ? missingChunks(part.chunks, size) : size > 0 ? "no chunk arrived" : "";
    if (missing) throw new ProtocolError(`obj-seal: part ${index} of upload ${tid} is not whole at ${size} bytes (${missing}); send its chunks first`);
    if (!part || part.sealed || t.op === "patch" || !isFilePart(size)) return { sealed: false };
    const sums: number[] = [];
    for (let at = 0; at < size; at += CHUNK) sums.push(part.sums.get(at)!);
    part.sealed = { size, sums };
    t.announced = true;
    this.opts.onSealed?.(ns, { key: userKey(t.key), upload: tid, part: index, size, sums, kind: t.kind, ...(t.dtype ? { dtype: t.dtype } : {}) }, t.origin);
    return { sealed: true };
  }

  /**
   * A node copying part `part` of upload `upload` (sealed) before the
   * commit: the bytes (a read transfer over the part's file, or over the
   * committed object's part once the upload committed to the version it
   * made), or a node of the part's tree to copy it from (`peers`). The head
   * sends each part once, as it sends a base once.
   */
  private getUploadPart(ns: string, full: string, h: Header, agent?: RequestingAgent): ServiceReply {
    const upload = num(h, "upload");
    const index = num(h, "part");
    this.traffic.uploadParts++;
    const gone = (): never => {
      throw new ObjectNotFoundError(`upload ${upload} of '${userKey(full)}' has no sealed part ${index} to copy now (it was dropped, or the object moved on); get the object once it is committed`, objectIds(full));
    };
    const open = this.writes.get(upload);
    let source: () => PartSource;
    let meta: PartMeta;
    if (open) {
      const p = open.ns === ns && open.key === full ? open.parts.get(index) : undefined;
      if (!p?.sealed) return gone();
      const sealed = p.sealed;
      meta = { kind: open.kind, dtype: open.dtype, size: sealed.size, version: 0, sums: sealed.sums };
      source = () => checkedFileSource(p.file, sealed.size, sealed.sums, objectIds(full), index);
    } else {
      const c = this.committed.get(upload);
      const obj = c?.key === full ? this.store.peek(full) : undefined;
      const part = obj && obj.version === c!.version ? [obj.base, ...obj.more][index] : undefined;
      if (!obj || !part) return gone();
      meta = { kind: part.kind, dtype: part.dtype, size: part.size, version: 0, ...(part.sums ? { sums: part.sums } : {}) };
      source = () => storedSource(this.store, obj, part, index);
    }
    if (agent) {
      const tree = uploadTree(full, upload, index);
      const failed = optStr(h, "failedPeer");
      let parent = HEAD;
      if (h.peers === true) parent = this.trees.assign(tree, 0, agent.id, (id) => id !== agent.id && agent.endpointOf(id) !== undefined, failed);
      else if (failed) this.trees.drop(failed);
      const endpoint = parent === HEAD ? undefined : agent.endpointOf(parent);
      if (endpoint) {
        this.traffic.peerHints++;
        return { value: { parts: [meta], peer: { agentId: parent, endpoint } } };
      }
    }
    return { value: { parts: [meta], tid: this.openRead(ns, [source()]) } };
  }

  /** Part `index` of upload `t`, its file made on first use. */
  private async chunk(ns: string, h: Header, data: Buffer | undefined): Promise<unknown> {
    const tid = num(h, "tid");
    const t = this.writeTransfer(ns, tid);
    const offset = num(h, "offset");
    const index = optNum(h, "part") ?? 0;
    if (t.size !== undefined && index !== 0) throw new ProtocolError(`obj-chunk: this upload declared one part of ${t.size} bytes; part ${index} does not exist`);
    if (!data || offset < 0 || (t.size !== undefined && offset + data.byteLength > t.size)) throw new ProtocolError("obj-chunk: chunk outside the declared size");
    // Chunks are the CHUNK-sized pieces at multiples of CHUNK (the last one shorter). Counting distinct
    // pieces, not bytes, means a resent or overlapping chunk cannot make an upload look complete while
    // part of its file was never written.
    const expected = t.size === undefined ? data.byteLength : Math.min(CHUNK, t.size - offset);
    if (offset % CHUNK !== 0 || data.byteLength !== expected || data.byteLength === 0 || data.byteLength > CHUNK) {
      throw new ProtocolError(`obj-chunk: expected ${expected} bytes at a multiple of ${CHUNK} (got ${data.byteLength} at ${offset}); send the object in the chunks obj-begin named`);
    }
    // The sum of what arrived: checked against the uploader's (a chunk hurt on its way is refused) and
    // recorded, so every later read of the part checks its bytes.
    const sum = chunkSum(data);
    if (h.crc !== undefined && h.crc !== sum) {
      throw new ProtocolError(`obj-chunk: the chunk at ${offset} of part ${index} arrived with sum ${sum.toString(16)}, not the ${Number(h.crc).toString(16)} it was sent with; send it again`);
    }
    t.lastActive = Date.now();
    const part = openUploadPart(this.store, t, index);
    // Every byte down, or the upload fails here: a short write on a filling disk is not a written chunk.
    const writing = writeAll(part.fd, data, offset, part.file);
    t.writing.add(writing);
    try {
      await writing;
    } catch (err) {
      // A full or failing disk: the upload is over, its file goes, nothing was committed.
      this.dropWrite(tid);
      throw storageError(t.op, t.key, err, " (the upload was dropped)");
    } finally {
      t.writing.delete(writing);
    }
    part.chunks.set(offset, data.byteLength);
    part.sums.set(offset, sum);
    this.traffic.bytesIn += data.byteLength;
    return { received: receivedBytes(t) };
  }

  private async commitUpload(ns: string, h: Header): Promise<unknown> {
    const tid = num(h, "tid");
    const t = this.writeTransfer(ns, tid);
    await Promise.allSettled([...t.writing]);
    if (!this.writes.has(tid)) throw new ProtocolError(`obj-commit: upload ${tid} was dropped (a chunk failed to reach the disk)`);
    const given = Array.isArray(h.sizes) ? (h.sizes as unknown[]) : [t.size ?? optNum(h, "size")];
    const sizes = given.map((v) => {
      if (typeof v !== "number" || !Number.isSafeInteger(v) || v < 0) throw new ProtocolError("obj-commit of a streamed upload needs the size of each part");
      return v;
    });
    if (sizes.length === 0 || sizes.length > MAX_UPLOAD_PARTS) throw new ProtocolError(`obj-commit: an upload has 1 to ${MAX_UPLOAD_PARTS} parts; got ${sizes.length}`);
    for (const i of t.parts.keys()) if (i >= sizes.length) throw new ProtocolError(`obj-commit: chunks arrived for part ${i}, but the commit names ${sizes.length} part(s)`);
    // An incomplete upload stays open: the missing chunks can still be sent and the commit retried.
    const total = sizes.reduce((a, b) => a + b, 0);
    const missing = sizes.map((size, i) => missingChunks(t.parts.get(i)?.chunks ?? new Map(), size)).filter(Boolean).join(", ");
    if (missing) throw new ProtocolError(`obj-commit: received ${receivedBytes(t)} of ${total} bytes; send the missing chunks (${missing}), then commit again`);
    this.writes.delete(tid);
    this.forgetUploads(t.key, tid);
    const files = sizes.map((size, i) => {
      const part = openUploadPart(this.store, t, i); // a part that got no chunk (empty) gets its empty file here
      closeSync(part.fd);
      const sums: number[] = [];
      for (let at = 0; at < size; at += CHUNK) sums.push(part.sums.get(at)!);
      return { kind: t.kind, dtype: t.dtype, size, file: part.file, sums };
    });
    let stored: StoredObject;
    try {
      stored = await this.store.writeFiles(t.op, t.key, files, t);
    } catch (err) {
      if (t.announced) this.announceDropped(t, tid);
      throw err;
    }
    if (t.announced) {
      // Nodes may still be copying its last sealed parts: those are read from the committed object now.
      this.committed.set(tid, { key: t.key, version: stored.version });
      if (this.committed.size > COMMITTED_KEPT) this.committed.delete(this.committed.keys().next().value!);
      this.opts.onSealed?.(ns, { key: userKey(t.key), upload: tid, part: 0, size: 0, sums: [], kind: t.kind, committed: stored.version }, t.origin);
    }
    return this.result(stored);
  }

  /** The trees of earlier uploads of `key` (not `keep`'s) go: nodes copy those parts no more. */
  private forgetUploads(key: string, keep: number): void {
    for (const [tid, c] of this.committed) {
      if (c.key !== key || tid === keep) continue;
      this.committed.delete(tid);
      this.trees.forget(uploadTree(key, tid, ""));
    }
  }

  private announceDropped(t: WriteTransfer, tid: number): void {
    this.trees.forget(uploadTree(t.key, tid, ""));
    this.opts.onSealed?.(t.ns, { key: userKey(t.key), upload: tid, part: 0, size: 0, sums: [], kind: t.kind, dropped: true }, t.origin);
  }

  private parseWrite(ns: string, h: Header, chunked = false): { op: WriteOp; key: string; kind: ValueKind; dtype?: DType; size?: number; ifVersion?: number; pin?: boolean; scratch?: boolean } {
    const op = str(h, "write");
    if (op !== "put" && op !== "update" && op !== "patch") throw new ProtocolError(`object write must be put, update or patch; got '${op}'`);
    const given = optStr(h, "key");
    if (given !== undefined && (given.length === 0 || given.length > 512 || given.includes("\0"))) {
      throw new HearthError(`object key must be 1-512 characters without NUL; got ${JSON.stringify(given.slice(0, 40))}`);
    }
    if (given === undefined && op !== "put") throw new ProtocolError(`${op} needs a key`);
    const kind = str(h, "kind");
    if (!KINDS.has(kind)) throw new ProtocolError(`object kind must be bytes, typed or msgpack; got '${kind}'`);
    const size = chunked ? optNum(h, "size") : num(h, "size");
    if (size !== undefined && (!Number.isSafeInteger(size) || size < 0)) throw new ProtocolError("object size must be a non-negative integer");
    return {
      op,
      key: `${ns}/${given ?? `obj-${randomUUID()}`}`,
      kind: kind as ValueKind,
      dtype: optStr(h, "dtype") as DType | undefined,
      size,
      ifVersion: optNum(h, "ifVersion"),
      pin: h.pin === true ? true : undefined,
      scratch: h.scratch === true ? true : undefined,
    };
  }

  private get(ns: string, h: Header, peer: string, agent?: RequestingAgent): ServiceReply {
    const full = `${ns}/${str(h, "key")}`;
    if (h.upload !== undefined) return this.getUploadPart(ns, full, h, agent);
    const r = this.store.read(full, optNum(h, "have"), optNum(h, "haveBase"));
    const base = { mode: r.mode, version: r.version, baseVersion: r.baseVersion };
    const object = r.object;
    const metas = (parts: StoredPart[]): PartMeta[] => parts.map((p) => ({ kind: p.kind, dtype: p.dtype, size: p.size, version: p.version, ...(p.sums ? { sums: p.sums } : {}) }));
    if (h.meta === true) {
      // What the object is (a node checking files it kept against it): its parts and sums, no data, no transfer.
      this.traffic.gets.meta++;
      return { value: { ...base, parts: r.mode === "not-modified" ? [] : metas(r.parts) } };
    }
    const baseParts = 1 + object.more.length;
    const large = [object.base, ...object.more].some((p) => isFilePart(p.size));
    // A node that is current, or takes only patches, holds the base: it may feed others.
    if (agent && large && r.mode !== "full") this.trees.holds(full, r.baseVersion, agent.id);
    if (r.mode === "not-modified") {
      this.traffic.gets.notModified++;
      return { value: { ...base, parts: [] } };
    }
    this.traffic.gets[r.mode === "full" ? "full" : "patches"]++;
    const parts = metas(r.parts);
    const total = r.parts.reduce((n, p) => n + p.size, 0);
    if (total <= INLINE_LIMIT) {
      this.count(total, peer);
      return { value: { ...base, parts }, frames: r.parts.map((p) => p.data!) };
    }
    let from: { agentId: string; endpoint: string } | undefined;
    if (agent && r.mode === "full" && large) {
      // Where this node copies the base from: a node of the base's tree when one can feed it (the head sends a base once).
      const failed = optStr(h, "failedPeer");
      let parent = HEAD;
      if (h.peers === true) parent = this.trees.assign(full, r.baseVersion, agent.id, (id) => id !== agent.id && agent.endpointOf(id) !== undefined, failed);
      else if (failed) this.trees.drop(failed);
      const endpoint = parent === HEAD ? undefined : agent.endpointOf(parent);
      if (endpoint) {
        this.traffic.peerHints++;
        from = { agentId: parent, endpoint };
      }
    }
    const sources: PartSource[] = [];
    try {
      for (const [i, p] of r.parts.entries()) sources.push(storedSource(this.store, r.object, p, i));
    } catch (err) {
      for (const s of sources) s.close();
      throw new HearthError(`object '${str(h, "key")}' cannot be read: ${(err as Error).message}`, { cause: err });
    }
    // With a peer: the node copies the base's parts (the first `peerParts`) from it and pulls only the rest (patches) here.
    return { value: { ...base, parts, tid: this.openRead(ns, sources, r.object), ...(from ? { peer: from, peerParts: baseParts } : {}) } };
  }

  private readRequest(ns: string, h: Header): { transfer: ReadTransfer; part: number; offset: number; length: number } {
    const tid = num(h, "tid");
    const t = this.reads.get(tid);
    // Another app's transfer answers exactly as a missing one: its existence is not revealed either.
    if (!t || t.ns !== ns) throw new ProtocolError(`no read transfer ${tid} in this app (finished, expired after ${TRANSFER_TTL_MS / 1000} s idle, or never opened by this app)`);
    t.lastActive = Date.now();
    const part = num(h, "part");
    const source = t.parts[part];
    const offset = num(h, "offset");
    if (!source || !Number.isSafeInteger(offset) || offset < 0 || offset >= source.size) throw new ProtocolError("obj-read: part or offset out of range");
    const length = Math.min(num(h, "length"), CHUNK, source.size - offset);
    if (!(length > 0)) throw new ProtocolError("obj-read: length must be positive");
    return { transfer: t, part, offset, length };
  }

  private count(bytes: number, peer: string): void {
    this.traffic.bytesOut += bytes;
    this.traffic.bytesOutTo[peer] = (this.traffic.bytesOutTo[peer] ?? 0) + bytes;
  }

  private finishRead(tid: number): void {
    const t = this.reads.get(tid);
    if (!t) return;
    this.reads.delete(tid);
    if (t.object) t.object.readers--;
    for (const s of t.parts) s.close();
  }

  private dropWrite(tid: number): void {
    const t = this.writes.get(tid);
    if (!t) return;
    this.writes.delete(tid);
    for (const p of t.parts.values()) {
      closeSync(p.fd);
      rmSync(p.file, { force: true });
    }
    if (t.announced) this.announceDropped(t, tid);
  }

  private writeTransfer(ns: string, tid: number): WriteTransfer {
    const t = this.writes.get(tid);
    if (!t || t.ns !== ns) throw new ProtocolError(`no write transfer ${tid} in this app (committed, dropped, expired after ${TRANSFER_TTL_MS / 1000} s idle, or never opened by this app)`);
    return t;
  }

  /** Drops transfers idle for too long (a reader or writer that vanished); an upload's file goes with it. */
  expire(now: number): void {
    this.credit.expire(now);
    for (const [tid, t] of this.reads) if (now - t.lastActive > TRANSFER_TTL_MS) this.finishRead(tid);
    for (const [tid, t] of this.writes) if (now - t.lastActive > TRANSFER_TTL_MS && t.writing.size === 0) this.dropWrite(tid);
  }

  /** Ends every transfer (the process is stopping): descriptors closed, uploads' files removed. */
  close(): void {
    for (const tid of [...this.reads.keys()]) this.finishRead(tid);
    for (const tid of [...this.writes.keys()]) this.dropWrite(tid);
  }
}

/** The tree of part `part` of upload `upload` of `key` ("" part: the prefix of all its parts' trees). */
function uploadTree(key: string, upload: number, part: number | ""): string {
  return `${key}\0upload ${upload}/${part}`;
}

/** Bytes of an object's base plus patches. */
export function totalSize(o: StoredObject): number {
  return allParts(o).reduce((n, p) => n + p.size, 0);
}
