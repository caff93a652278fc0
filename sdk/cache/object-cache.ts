/**
 * The object cache client, the same for drivers and executors. Values larger
 * than a call message travel here and are passed around as ObjectRefs.
 *
 * Versions: every key has one version number that starts at 1 on `put` and
 * grows by exactly 1 on every `update` (new base, patches cleared) and every
 * `patch` (appended, base kept). It is a cache validator: `get` sends the
 * version it holds and receives not-modified, only the patches after it, or
 * the whole object. Writes take an optional `ifVersion` precondition (compare
 * and swap): the write happens only if the key is at that version, else it
 * fails with VersionConflictError and nothing is lost.
 *
 * Objects of any size: `put(fromFile(path))` and `put(fromStream(chunks))`
 * write without holding the value whole; `getToFile`, `getStream` and
 * `getParts` read that way. On an executor (`local`: reads go to its node
 * cache) a large part is read where the node keeps its one copy, a file the
 * executor (or its engine) reads in place: no bytes cross a socket for it.
 * `get` assembles a value in memory and refuses one over this process's
 * buffer limit (BufferLimitError, buffers.ts).
 */
import { mkdirSync } from "node:fs";
import { open } from "node:fs/promises";
import path from "node:path";
import { HearthError } from "../errors/index.js";
import type { Requester } from "../wire/requests.js";
import { admitObjectBuffer, allocObjectBuffer } from "./buffers.js";
import { fileChunks, writeAll } from "./file-io.js";
import { fileSink, OrderedChunks } from "./sinks.js";
import { INLINE_LIMIT, ackSoon, bufferSink, download, fileSource, noteRead, pullChunks, upload, type PartMeta, type SentPart, type UploadSource, type WriteResult } from "./transfer.js";
import { KeepOnNode } from "./keep-on-node.js";
import { decodeValue, encodeValue } from "./values.js";

/** A reference to a cached object; small enough to pass in any call. */
export interface ObjectRef {
  readonly $ref: "hearth.object";
  readonly key: string;
  /** The version this ref was made at (a `get` returns the latest). */
  readonly version: number;
  /** Bytes of base plus patches at that version. */
  readonly size: number;
}

/** Combines a base with patches; called again with only the patches not yet folded. May be async. */
export type Fold<T> = (acc: T, patches: unknown[]) => T | Promise<T>;

/** Options of `put`. */
export interface PutOptions {
  /** The key; default a fresh unique one. */
  key?: string;
  /** Never evict this object under memory pressure. */
  pin?: boolean;
  /**
   * Owned by this app's session: the head deletes it when it releases the
   * app (closed, or its keep-alive ran out), if no one deleted it before.
   * For per-step data whose owner (a driver's step, a call) may vanish
   * without cleaning up; what a run documents (its weights, its state) is
   * put without it.
   */
  scratch?: boolean;
}

/** Options of `update` and `patch`. */
export interface WriteOptions {
  /** Write only if the key is at this version (compare and swap). */
  ifVersion?: number;
}

/** Options of `get`. */
export interface GetOptions<T> {
  /** Combines the base with patches. Default: arrays concatenate, bytes concatenate, anything else must not have patches. */
  fold?: Fold<T>;
}

/** Bytes to write without holding them whole: made by `fromFile` or `fromStream`. */
export interface StreamedValue {
  readonly $streamed: true;
  /** Opens the source (a file is opened and sized here). */
  open(): Promise<UploadSource>;
}

/** Options of `fromFile`. */
export interface FromFileOptions {
  /** Write `length` bytes from `offset` (default the whole file). */
  offset?: number;
  length?: number;
  /**
   * The file is the cache's once it reached the head: on an executor, its
   * node may keep it as its copy (a hard link to the same file, made the
   * agent's and read-only to the app) instead of fetching the object back.
   * The writer may remove it after the write, and must not change it: the
   * node's copy would then fail its checks and be fetched again. Only for a
   * whole file of a base (`put`, `update`).
   */
  handOver?: boolean;
}

/** Writes the bytes of `file` (or `range.length` of them from `range.offset`) as raw bytes, read a chunk at a time. */
export function fromFile(file: string, range: FromFileOptions = {}): StreamedValue {
  return { $streamed: true, open: () => fileSource(file, range) };
}

/** Writes the bytes a stream yields (as raw bytes), in CHUNK-sized pieces as they come; its length is known at the end. */
export function fromStream(chunks: AsyncIterable<Uint8Array>): StreamedValue {
  return { $streamed: true, open: async () => ({ kind: "bytes", chunks }) };
}

/**
 * Writes a base of several parts (e.g. a publication's shards), each from a
 * file or a stream, sent in order as each arrives (a producer may still be
 * making the next one); `getParts` reads them back one by one. Committed
 * when the last is in: readers never see some of the parts.
 */
export function fromParts(parts: Iterable<StreamedValue> | AsyncIterable<StreamedValue>): StreamedValue {
  return {
    $streamed: true,
    open: async () => ({
      kind: "bytes",
      parts: (async function* () {
        for await (const p of parts) {
          const source = await p.open();
          if ("parts" in source) throw new HearthError("a part of fromParts cannot itself have parts");
          yield source;
        }
      })(),
    }),
  };
}

function isStreamed(v: unknown): v is StreamedValue {
  return typeof v === "object" && v !== null && (v as StreamedValue).$streamed === true;
}

/** One part of an object as `getParts` hands it over: small ones in memory, large ones as a file to read in place. */
export interface LocalPart extends PartMeta {
  data?: Buffer;
  /** The file holding exactly this part's `size` bytes. */
  file?: string;
  /** With `progressive`: the file is still being written by the node; read it once this resolves (it rejects if the node's copy failed). */
  ready?: () => Promise<void>;
}

/** What `getParts` returns: like an incremental get, with each part's bytes where they lie. */
export interface LocalParts {
  mode: "not-modified" | "patches" | "full";
  version: number;
  baseVersion: number;
  parts: LocalPart[];
}

/** Options of `getParts`. */
export interface GetPartsOptions {
  /** Where a client without a node cache (a driver) writes large parts; an executor reads its node's copy and ignores it. */
  dir?: string;
  /** Ignore what this client got before: every part of the latest version. */
  full?: boolean;
  /** The version (and base version) the caller holds, instead of what this client got before. */
  have?: { version: number; baseVersion: number };
  /**
   * On an executor: answer as soon as the node knows the parts of a whole
   * copy it is still receiving, each large part with `ready()` to await
   * before reading it, so the first part can be used while later ones
   * still arrive. Elsewhere (a driver) it changes nothing.
   */
  progressive?: boolean;
}

interface Held {
  version: number;
  baseVersion: number;
  value: unknown;
}

/** Is this value an ObjectRef? */
export function isObjectRef(v: unknown): v is ObjectRef {
  return typeof v === "object" && v !== null && (v as ObjectRef).$ref === "hearth.object" && typeof (v as ObjectRef).key === "string";
}

/** Options of the client. */
export interface ObjectCacheOptions {
  /** Reads go to this node's cache, which hands large parts over as files of this node (executors). */
  local?: boolean;
}

/** The client. Drivers get one from `app.objects`, executors from `ctx.objects`. */
export class ObjectCache {
  private readonly held = new Map<string, Held>();
  /** Versions handed out by getParts, per key. */
  private readonly partsHeld = new Map<string, { version: number; baseVersion: number }>();
  /**
   * What this client's gets did, for benchmarks and tests: bytes over a
   * socket, and bytes read from its node's files; and of its writes, the
   * bytes sent and those its node kept as its copy from the files written.
   */
  readonly stats = { notModified: 0, patches: 0, full: 0, bytesReceived: 0, bytesSent: 0, bytesReadLocal: 0, bytesKeptByNode: 0 };

  /**
   * @param reads where gets go (the head, or an executor's node-local agent)
   * @param writes where writes go (always the head)
   */
  constructor(
    private readonly reads: Requester,
    private readonly writes: Requester = reads,
    private readonly opts: ObjectCacheOptions = {},
  ) {}

  /** Stores a new object (version 1): a value, or `fromFile`/`fromStream` bytes. */
  async put(value: unknown, opts: PutOptions = {}): Promise<ObjectRef> {
    return this.write("put", opts.key, value, { pin: opts.pin, scratch: opts.scratch });
  }

  /** Replaces the base (version + 1, patches cleared). */
  async update(ref: ObjectRef | string, value: unknown, opts: WriteOptions = {}): Promise<ObjectRef> {
    return this.write("update", keyOf(ref), value, opts);
  }

  /** Appends a patch (version + 1, base kept). */
  async patch(ref: ObjectRef | string, delta: unknown, opts: WriteOptions = {}): Promise<ObjectRef> {
    return this.write("patch", keyOf(ref), delta, opts);
  }

  /** Deletes every object whose key starts with `prefix` in this app; returns how many. */
  async delete(prefix: string): Promise<number> {
    for (const k of this.held.keys()) if (k.startsWith(prefix)) this.held.delete(k);
    for (const k of this.partsHeld.keys()) if (k.startsWith(prefix)) this.partsHeld.delete(k);
    return (await this.writes.request<{ deleted: number }>("obj-delete", { prefix })).value.deleted;
  }

  /** The latest value of an object, fetching only what this client has not seen; assembled in memory (BufferLimitError past the limit). */
  async get<T = unknown>(ref: ObjectRef | string, opts: GetOptions<T> = {}): Promise<T> {
    const key = keyOf(ref);
    const held = this.held.get(key);
    let d: { mode: "not-modified" | "patches" | "full"; version: number; baseVersion: number; parts: Array<PartMeta & { data?: Buffer }> };
    if (this.opts.local) {
      const local = await this.openLocal(key, held?.version, held?.baseVersion);
      const parts: Array<PartMeta & { data?: Buffer }> = [];
      for (const [i, p] of local.parts.entries()) parts.push({ ...p, data: p.data ?? (await this.readWhole(key, p, i)) });
      d = { ...local, parts };
    } else {
      const got = await download(this.reads, { key, have: held?.version, haveBase: held?.baseVersion });
      this.stats.bytesReceived += got.bytes;
      d = got;
    }
    if (d.mode === "not-modified") {
      this.stats.notModified++;
      return held!.value as T;
    }
    this.stats[d.mode === "full" ? "full" : "patches"]++;
    const decoded = d.parts.map((p) => decodeValue(p.kind, p.data ?? Buffer.alloc(0), p.dtype));
    const fold = opts.fold ?? (defaultFold as Fold<T>);
    let value: unknown;
    if (d.mode === "patches") {
      value = await fold(held!.value as T, decoded);
    } else {
      // The base may be several parts (fromParts): they come first, all at the base version.
      const n = Math.max(1, d.parts.filter((p) => p.version === d.baseVersion).length);
      const patches = decoded.slice(n);
      const base = n === 1 ? decoded[0] : joinParts(key, decoded.slice(0, n));
      value = patches.length > 0 || opts.fold ? await fold(base as T, patches) : base;
    }
    this.held.set(key, { version: d.version, baseVersion: d.baseVersion, value });
    return value as T;
  }

  /**
   * The parts of an object since the version this client last got with
   * getParts (or all of them with `full`): small parts in memory, large ones
   * as files. On an executor the files are its node's one copy, to read in
   * place soon (the node may evict it later; a missing file means: get it
   * again); a driver's are downloaded into `dir` and are the caller's.
   */
  async getParts(ref: ObjectRef | string, opts: GetPartsOptions = {}): Promise<LocalParts> {
    const key = keyOf(ref);
    const held = opts.full ? undefined : (opts.have ?? this.partsHeld.get(key));
    let r: LocalParts;
    if (this.opts.local) r = await this.openLocal(key, held?.version, held?.baseVersion, opts.progressive === true);
    else {
      if (!opts.dir) throw new HearthError(`getParts of '${key}' on a client without a node cache needs { dir } to write its large parts to`);
      const dir = opts.dir;
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      const files: string[] = [];
      const got = await download(this.reads, { key, have: held?.version, haveBase: held?.baseVersion }, (m, i) => {
        if (m.size <= INLINE_LIMIT) return undefined;
        const file = path.join(dir, `${safeName(key)}.${m.version}.${i}`);
        files[i] = file;
        return fileSink(file);
      });
      this.stats.bytesReceived += got.bytes;
      r = { mode: got.mode, version: got.version, baseVersion: got.baseVersion, parts: got.parts.map((p, i) => ({ ...p, ...(files[i] ? { file: files[i] } : {}) })) };
    }
    this.partsHeld.set(key, { version: r.version, baseVersion: r.baseVersion });
    return r;
  }

  /** Writes the latest version's bytes (base, then patches) into `file`; returns its version and size. Nothing is held whole. */
  async getToFile(ref: ObjectRef | string, file: string): Promise<{ version: number; size: number }> {
    const fh = await open(file, "w", 0o600);
    let size = 0;
    let version = 0;
    try {
      for await (const chunk of this.streamParts(keyOf(ref), (v) => (version = v))) {
        await writeAll(fh.fd, chunk, size, file);
        size += chunk.byteLength;
      }
    } finally {
      await fh.close();
    }
    return { version, size };
  }

  /** The latest version's bytes (base, then patches) as a stream of chunks, in order; at most a few chunks are held at once. */
  getStream(ref: ObjectRef | string): AsyncIterable<Buffer> {
    return this.streamParts(keyOf(ref), () => undefined);
  }

  /**
   * On an executor: has its node make a folder of these objects (one file
   * per entry, its parts' bytes in order) from the node's own copies, once
   * per node, and returns its path to read in place. Undefined for a client
   * without a node cache (a driver).
   */
  async nodeFolder(id: string, files: Array<{ name: string; size: number; parts: string[] }>): Promise<{ dir: string; built: boolean } | undefined> {
    if (!this.opts.local) return undefined;
    return (await this.reads.request<{ dir: string; built: boolean }>("obj-folder", { id, files }, [], null)).value;
  }

  /** What the store this client reads from says of itself (`obj-stat`: the head's or, on an executor, its node cache's counters). */
  async stat(): Promise<Record<string, unknown>> {
    return (await this.reads.request<Record<string, unknown>>("obj-stat", {})).value;
  }

  /** The version this client holds for `key`, if any. */
  heldVersion(ref: ObjectRef | string): number | undefined {
    return this.held.get(keyOf(ref))?.version;
  }

  /** Drops this client's copy of `key` (the next get fetches everything). */
  forget(ref: ObjectRef | string): void {
    this.held.delete(keyOf(ref));
    this.partsHeld.delete(keyOf(ref));
  }

  private async *streamParts(key: string, onVersion: (v: number) => void): AsyncGenerator<Buffer> {
    if (this.opts.local) {
      const local = await this.openLocal(key);
      onVersion(local.version);
      for (const [i, p] of local.parts.entries()) {
        if (p.data) {
          this.stats.bytesReadLocal += p.data.byteLength;
          yield p.data;
          continue;
        }
        // The node's copy, read in place and checked chunk by chunk against the sums the head recorded.
        for await (const chunk of fileChunks(p.file!, p.size, p.sums, { key, part: i })) {
          this.stats.bytesReadLocal += chunk.byteLength;
          yield chunk;
        }
      }
      return;
    }
    const ordered = new OrderedChunks();
    let sizes: number[] = [];
    const fetching = download(this.reads, { key }, (m, i) => {
      if (i === 0) sizes = [];
      sizes[i] = m.size;
      return ordered.sinkFor(i, () => sizes.slice(0, i).reduce((a, b) => a + b, 0));
    }).then(
      (d) => {
        this.stats.bytesReceived += d.bytes;
        onVersion(d.version);
        ordered.finish(sizes.reduce((a, b) => a + b, 0));
      },
      (err: unknown) => ordered.fail(err),
    );
    try {
      for await (const chunk of ordered) yield chunk;
    } finally {
      ordered.fail(new HearthError("the reader stopped"));
      await fetching;
    }
  }

  /** Asks the node cache for the parts since `have`: small ones inline, large ones as this node's files. */
  private async openLocal(key: string, have?: number, haveBase?: number, progressive = false): Promise<LocalParts> {
    const { value, frames } = await this.reads.request("obj-open", { key, have, haveBase, ...(progressive ? { progressive } : {}) }, [], null);
    const v = value as { mode: LocalParts["mode"]; version: number; baseVersion: number; tid?: number; parts: Array<PartMeta & { file?: string; inline?: number; pull?: number; pending?: number }> };
    noteRead(this.reads, value as { ack?: unknown });
    // Small parts past what one answer carries: pulled from the node like any object, into buffers.
    const pulled: Buffer[] = [];
    if (v.tid !== undefined) {
      const metas = v.parts.filter((p) => p.pull !== undefined);
      const sinks = metas.map((m) => bufferSink(m, { key }));
      await pullChunks(this.reads, v.tid, metas, sinks, { key });
      for (const s of sinks) pulled.push(s.data!);
      ackSoon(this.reads);
    }
    const ready = (part: number) => async (): Promise<void> => {
      await this.reads.request("obj-wait", { key, version: v.version, baseVersion: v.baseVersion, part }, [], null);
    };
    const parts: LocalPart[] = v.parts.map((p) => ({
      kind: p.kind,
      dtype: p.dtype,
      size: p.size,
      version: p.version,
      ...(p.sums ? { sums: p.sums } : {}),
      ...(p.file !== undefined ? { file: p.file } : { data: (p.pull !== undefined ? pulled[p.pull] : frames[p.inline ?? 0]) ?? Buffer.alloc(0) }),
      ...(p.pending !== undefined ? { ready: ready(p.pending) } : {}),
    }));
    for (const p of parts) if (p.data) this.stats.bytesReceived += p.data.byteLength;
    return { mode: v.mode, version: v.version, baseVersion: v.baseVersion, parts };
  }

  /**
   * A large part's bytes read whole from its file (under the buffer limit), a
   * chunk at a time and checked: readFileSync would stop at 2 GiB, whatever
   * the limit, and check nothing.
   */
  private async readWhole(key: string, p: LocalPart, index: number): Promise<Buffer> {
    const data = allocObjectBuffer(p.size, { key });
    let at = 0;
    for await (const chunk of fileChunks(p.file!, p.size, p.sums, { key, part: index })) {
      chunk.copy(data, at);
      at += chunk.byteLength;
    }
    this.stats.bytesReadLocal += at;
    return data;
  }

  private async write(op: "put" | "update" | "patch", key: string | undefined, value: unknown, opts: { ifVersion?: number; pin?: boolean; scratch?: boolean }): Promise<ObjectRef> {
    const source = isStreamed(value) ? await value.open() : encodeValue(value);
    // On an executor, a base written from files is kept by its node as the node's copy (keep-on-node.ts).
    const keep = this.opts.local && op !== "patch" && isStreamed(value) ? new KeepOnNode(this.reads) : undefined;
    let r: WriteResult;
    try {
      r = await upload(this.writes, op, key, source, { ...opts, ...(keep ? { onPartSent: (i: number, sent: SentPart) => keep.part(i, sent) } : {}) });
    } catch (err) {
      keep?.failed();
      throw err;
    }
    this.stats.bytesSent += r.size;
    if (keep) this.stats.bytesKeptByNode += await keep.committed(r);
    return { $ref: "hearth.object", key: r.key, version: r.version, size: r.size };
  }
}

function keyOf(ref: ObjectRef | string): string {
  if (typeof ref === "string") return ref;
  if (isObjectRef(ref)) return ref.key;
  throw new HearthError("expected an ObjectRef (from put/update/patch) or a key string");
}

/** A base of several byte parts, as one value (getParts reads them one by one instead). */
function joinParts(key: string, parts: unknown[]): Buffer {
  if (!parts.every((p) => Buffer.isBuffer(p))) throw new HearthError(`'${key}' has a base of ${parts.length} parts that are not all bytes; read it with getParts`);
  const size = (parts as Buffer[]).reduce((n, p) => n + p.byteLength, 0);
  admitObjectBuffer(size, { key });
  return Buffer.concat(parts as Buffer[]);
}

/** A key as part of a file name. */
function safeName(key: string): string {
  return key.replace(/[^A-Za-z0-9._-]/g, "_").slice(0, 120);
}

/** Arrays and byte strings concatenate; other values cannot take patches without a fold. */
function defaultFold(acc: unknown, patches: unknown[]): unknown {
  if (Array.isArray(acc)) return [...acc, ...patches.flatMap((p) => (Array.isArray(p) ? p : [p]))];
  if (Buffer.isBuffer(acc)) return Buffer.concat([acc, ...(patches as Buffer[])]);
  throw new HearthError(`this object has ${patches.length} patch(es) on a base that is neither an array nor bytes; pass get(ref, { fold: (acc, patches) => … })`);
}
