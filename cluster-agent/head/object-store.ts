/**
 * The object store of the head (the authoritative copy) and of every node
 * cache (a replica): versioned objects, a base plus appended patches.
 *
 * Small parts (up to INLINE_LIMIT, 1 MiB) live in memory under `memLimit`,
 * with LRU eviction of objects that are neither pinned nor being read. Large
 * parts never do: each is one file, written chunk by chunk as it arrives and
 * read chunk by chunk (or mapped by an engine) where it lies, so no process
 * holds a large object whole and none is bounded by Node's 4 GiB Buffer.
 * Large parts live in the data dir when there is one, else in `files` (a
 * node cache's per-app folders) or a private spool folder; files outside a
 * data dir count against `fileLimit` (or, without one, against `memLimit`:
 * the head's spool is part of what its limit bounds).
 *
 * With a data dir every write and delete reaches the disk first (an object's
 * metadata file is its commit point) and memory follows only if the disk took
 * it, so a refused write leaves no trace, eviction only drops the memory copy
 * of small parts, and objects survive a head restart as the writers were
 * told. Files are opened, written or read, and closed per operation (a read
 * transfer keeps one descriptor per large part it serves), so descriptors
 * stay bounded whatever the object count.
 *
 * Durability (store-files.ts): with a data dir a write is reported only once
 * its parts, their folder and its manifest are flushed to the disk, in that
 * order, so a power loss after a commit loses nothing and tears nothing.
 * Flushes cost milliseconds each, so writes to a data dir commit in groups:
 * each write's bytes are flushed off the event loop as soon as they are in,
 * then every write waiting (one per key) is placed, their manifests flushed
 * together, renamed, and the folder flushed once for all of them.
 */
import { existsSync, mkdirSync, readdirSync, renameSync, rmSync } from "node:fs";
import { sumsOf } from "../../sdk/cache/file-io.js";
import os from "node:os";
import path from "node:path";
import type { DType, ValueKind } from "../../sdk/cache/values.js";
import { allParts, isFilePart, moreMeta, sizeOf, storageError, strip, userKey, objectIds, type ObjectMeta, type PartFile, type PartFiles, type ReadResult, type ReplicaPart, type StoredObject, type StoredPart, type ObjectStoreOptions, type WriteOp } from "./stored-objects.js";

export { allParts, isFilePart, storageError, userKey, objectIds, type PartFile, type PartFiles, type ReadResult, type ReplicaPart, type StoredObject, type StoredPart, type ObjectStoreOptions, type WriteOp };
import { CacheFullError, HearthError, ObjectEvictedError, ObjectNotFoundError, VersionConflictError } from "../../sdk/errors/index.js";
import { formatBytes } from "../../sdk/format.js";
import { GroupCommits, type CommitPlan, type IncomingPart, type Pool, type WriteOptions } from "./group-commit.js";
import { baseFileIn, keyHash, makeSpool, patchFileIn, readStoredIndex, readSmallPart, removeFiles, syncDirSync, writeFileDurableSync } from "./store-files.js";

const MAX_TOMBSTONES = 10_000;
/** Uploads and fetches in progress are files with this suffix; a restarted store removes what a crash left. */
const RECEIVING = ".receiving";


export class ObjectStore {
  private readonly objects = new Map<string, StoredObject>();
  private readonly evicted = new Map<string, string>();
  private readonly used: Record<Pool, number> = { mem: 0, file: 0 };
  /** A logical clock for LRU order (milliseconds can tie). */
  private clock = 0;
  /** The objects folder of the data dir, once open() ran; until then (or without a data dir) the store is memory-only. */
  private dir?: string;
  /** The spool folder this store made for large parts (no data dir, no `files`). */
  private spool?: string;
  private receivingSeq = 0;
  /** Bytes planned writes hold in each pool until they are applied (a group commit plans several at once). */
  private readonly reserved: Record<Pool, number> = { mem: 0, file: 0 };
  /** Writes to the data dir, committed in groups. */
  private readonly commits: GroupCommits;
  /** Spools of dead processes that open() removed (the head logs them). */
  swept: string[] = [];
  /** Evictions, spills to disk and reloads; with a data dir, durable writes, the group commits that flushed them, and the time those took. */
  readonly stats = { evictions: 0, spills: 0, reloads: 0, syncs: 0, groupCommits: 0, syncMs: 0 };

  /** Records the options only (no I/O): open() creates the folders and reloads what a data dir holds. */
  constructor(private readonly opts: ObjectStoreOptions) {
    // The steps of a write a group commit runs, bound to this store (its private state stays here).
    this.commits = new GroupCommits({
      dir: () => this.dir!,
      sync: opts.sync !== false,
      receivingFile: (key) => this.receivingFile(key),
      metaFile: (key) => this.metaFile(key),
      current: (key) => this.objects.get(key),
      plan: (op, key, parts, o) => this.plan(op, key, parts, o),
      placeParts: (plan, parts) => this.placeParts(plan, parts),
      undo: (plan, extra) => this.undo(plan, extra),
      apply: (plan) => this.apply(plan),
      stats: this.stats,
    });
  }

  /**
   * With a data dir: creates its objects folder, removes uploads a crash
   * left unfinished and reloads the index a previous instance persisted;
   * from then on writes go through to disk. Without one, makes the spool
   * folder for large parts (unless `files` names where they go). Idempotent.
   */
  open(): this {
    if (this.dir !== undefined || this.spool !== undefined) return this;
    if (this.opts.dataDir !== undefined) {
      const dir = path.join(this.opts.dataDir, "objects");
      mkdirSync(dir, { recursive: true, mode: 0o700 });
      this.dir = dir;
      for (const f of readdirSync(dir)) if (f.endsWith(RECEIVING) || f.endsWith(".tmp")) rmSync(path.join(dir, f), { force: true });
      this.loadIndex();
    } else if (!this.opts.files) {
      // Under a parent every head of this user shares, so a head killed with -9 leaves nothing past the next start.
      const made = makeSpool(this.opts.spoolDir ?? os.tmpdir());
      this.spool = made.dir;
      this.swept = made.swept;
    }
    return this;
  }

  /** Where large parts go without a data dir (the spool), once open() ran. */
  get spoolDir(): string | undefined {
    return this.spool;
  }

  /** Removes the spool folder this store made (its files go with it). */
  close(): void {
    if (this.spool) rmSync(this.spool, { recursive: true, force: true });
  }

  /** Object count and bytes (base plus patches, in memory or not), memory and file use, and limits. */
  usage(): { objects: number; bytes: number; memUsed: number; memLimit: number; fileUsed: number; extraFileBytes: number; fileLimit: number | null; persistent: boolean; evictions: number; spills: number; reloads: number; syncs: number; groupCommits: number; syncMs: number } {
    let bytes = 0;
    for (const o of this.objects.values()) bytes += sizeOf(o);
    const fileLimit = this.dir ? null : (this.opts.fileLimit ?? null);
    const extra = this.extraFiles();
    return { objects: this.objects.size, bytes, memUsed: this.used.mem, memLimit: this.opts.memLimit, fileUsed: this.used.file + extra, extraFileBytes: extra, fileLimit, persistent: this.dir !== undefined, ...this.stats };
  }

  /** Checks a write's preconditions without writing. Throws VersionConflictError or ObjectNotFoundError. */
  check(op: WriteOp, key: string, ifVersion?: number): void {
    const existing = this.objects.get(key);
    const current = existing?.version ?? 0;
    if (ifVersion !== undefined && ifVersion !== current) {
      throw new VersionConflictError(
        `${op} of '${userKey(key)}' expected version ${ifVersion} but it is at ${current}${current === 0 ? " (it does not exist)" : ""}; get it again and retry`,
        { ...objectIds(key), expected: ifVersion, actual: current },
      );
    }
    if (op === "put" && existing) {
      throw new VersionConflictError(`put: '${userKey(key)}' already exists at version ${current}; use update(ref, value) to replace it`, { ...objectIds(key), expected: 0, actual: current });
    }
    if (op !== "put" && !existing) throw new ObjectNotFoundError(`${op}: no object '${userKey(key)}' in this app; put it first`, objectIds(key));
  }

  /**
   * A new file for a large part of `key` being received (an upload, a node's
   * fetch): fill it, then commit it with `writeFile` or `replicate`, or
   * remove it. It lies where the part will live, so committing is a rename.
   */
  receivingFile(key: string): string {
    const dir = this.partDir(key);
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    return path.join(dir, `${keyHash(key)}.${process.pid}-${++this.receivingSeq}${RECEIVING}`);
  }

  /** Applies a write of bytes in memory (a large one is written to its file here). See writeFiles. */
  async write(op: WriteOp, key: string, value: { kind: ValueKind; dtype?: DType; data: Buffer }, opts: WriteOptions = {}): Promise<StoredObject> {
    const size = value.data.byteLength;
    if (!isFilePart(size)) return this.commitWrite(op, key, [{ kind: value.kind, dtype: value.dtype, size, data: value.data }], opts);
    const file = this.receivingFile(key);
    try {
      writeFileDurableSync(file, value.data, false);
    } catch (err) {
      rmSync(file, { force: true });
      throw storageError(op, key, err, "");
    }
    return this.writeFiles(op, key, [{ kind: value.kind, dtype: value.dtype, size, file, sums: sumsOf(value.data) }], opts);
  }

  /**
   * Commits parts received into files (from receivingFile) as the write
   * `op`: one or more base parts for `put`/`update`, one part for `patch`.
   * With a data dir the disk takes them before memory changes, durably (see
   * the module doc): if it refuses (ENOSPC, EROFS…) the files are removed
   * and the store is as it was, so the same write can be retried and a
   * restarted head reloads exactly what writes reported. The received files
   * are consumed either way.
   * Throws VersionConflictError, ObjectNotFoundError, CacheFullError or ObjectStorageError.
   */
  async writeFiles(op: WriteOp, key: string, parts: PartFile[], opts: WriteOptions = {}): Promise<StoredObject> {
    try {
      // A streamed part that turned out small is kept in memory like any small part (its bytes checked once more on the way).
      return await this.commitWrite(op, key, parts.map((p, i) => (isFilePart(p.size) ? p : { ...p, file: undefined, data: readSmallPart(p.file, p.size, p.sums, key, i) })), opts);
    } finally {
      for (const p of parts) rmSync(p.file, { force: true });
    }
  }

  /** One write of `parts`: at once without a data dir; with one, through the next group commit. */
  private async commitWrite(op: WriteOp, key: string, parts: IncomingPart[], opts: WriteOptions): Promise<StoredObject> {
    if (!this.dir) {
      const plan = this.plan(op, key, parts, opts);
      try {
        this.placeParts(plan, parts);
      } catch (err) {
        this.unreserve(plan);
        throw err;
      }
      return this.apply(plan);
    }
    this.check(op, key, opts.ifVersion);
    return this.commits.commit(op, key, parts, opts);
  }

  /**
   * Decides a write: its preconditions, version, room (held in `reserved`
   * until it is applied or undone) and manifest. Changes nothing else.
   */
  private plan(op: WriteOp, key: string, incoming: IncomingPart[], opts: WriteOptions): CommitPlan {
    this.check(op, key, opts.ifVersion);
    if (incoming.length === 0 || (op === "patch" && incoming.length !== 1)) throw new HearthError(`${op} of '${userKey(key)}' has ${incoming.length} parts: a base has one or more, a patch exactly one`);
    const existing = this.objects.get(key);
    const version = (existing?.version ?? 0) + 1;
    const parts: StoredPart[] = incoming.map((p) => ({ kind: p.kind, dtype: p.dtype, size: p.size, version, sums: p.sums ?? (p.data ? sumsOf(p.data) : undefined), ...(p.data ? { data: p.data } : {}) }));
    // A new base replaces the old one and its patches at once: their bytes count as free, so an
    // object that fits as one base plus its history can always be re-based.
    const reserved: Record<Pool, number> = { mem: 0, file: 0 };
    for (const pool of ["mem", "file"] as const) {
      const bytes = parts.filter((p) => this.poolOf(p) === pool).reduce((n, p) => n + p.size, 0);
      if (bytes === 0) continue;
      this.makeRoom(bytes, key, op === "patch" ? 0 : this.freedBy(op, key, pool), pool);
      reserved[pool] = bytes;
    }
    this.reserved.mem += reserved.mem;
    this.reserved.file += reserved.file;
    const meta: ObjectMeta =
      op === "patch"
        ? { key, version, baseVersion: existing!.baseVersion, pinned: existing!.pinned, ...(existing!.scratch ? { scratch: true } : {}), base: strip(existing!.base), ...moreMeta(existing!.more), patches: [...existing!.patches.map(strip), strip(parts[0]!)] }
        : { key, version, baseVersion: version, pinned: opts.pin ?? existing?.pinned ?? false, ...((opts.scratch ?? existing?.scratch) ? { scratch: true } : {}), base: strip(parts[0]!), ...moreMeta(parts.slice(1)), patches: [] };
    const targets = op === "patch" ? [this.patchFile(key, version)] : parts.map((_, i) => this.baseFile(key, version, i));
    return { op, key, existing, version, parts, meta, targets, reserved };
  }

  /**
   * Puts each part's file where the plan says (a rename; a new base's files
   * carry its version, so the current one's are never touched). On failure
   * the files placed are removed and an ObjectStorageError is thrown.
   */
  private placeParts(plan: CommitPlan, parts: IncomingPart[]): void {
    const made: string[] = [];
    try {
      parts.forEach((p, i) => {
        if (!p.file) return;
        renameSync(p.file, plan.targets[i]!);
        made.push(plan.targets[i]!);
      });
    } catch (err) {
      removeFiles(made);
      throw storageError(plan.op, plan.key, err, "");
    }
  }

  private unreserve(plan: CommitPlan): void {
    this.reserved.mem -= plan.reserved.mem;
    this.reserved.file -= plan.reserved.file;
    plan.reserved = { mem: 0, file: 0 };
  }

  /** A planned write that will not be applied: its room freed, its placed files and `extra` (its manifest) removed. */
  private undo(plan: CommitPlan, extra: string): void {
    this.unreserve(plan);
    removeFiles([...plan.targets, extra]);
  }

  /** Memory follows a write the disk took (or one that needs no disk). */
  private apply(plan: CommitPlan): StoredObject {
    this.unreserve(plan);
    const { op, key, existing, version, parts, targets } = plan;
    let obj: StoredObject;
    if (op === "patch") {
      obj = existing!;
      obj.patches.push(parts[0]!);
      obj.version = version;
    } else {
      if (existing) {
        this.release(existing);
        removeFiles(this.filesOf(existing).filter((f) => !targets.includes(f)));
      }
      obj = { key, version, baseVersion: version, base: parts[0]!, more: parts.slice(1), patches: [], pinned: plan.meta.pinned, lastUsed: 0, readers: 0 };
      if (plan.meta.scratch) obj.scratch = true;
      this.objects.set(key, obj);
    }
    obj.lastUsed = ++this.clock;
    for (const p of parts) {
      const pool = this.poolOf(p);
      if (pool) this.used[pool] += p.size;
    }
    this.evicted.delete(key);
    return obj;
  }

  /**
   * Installs what another store answered to an incremental get, so this copy
   * matches it version for version (node caches keep replicas this way).
   * Large parts arrive in received files (receivingFile) and are renamed into
   * place; on a refusal (CacheFullError, a storage error) they are removed
   * and the replica is as it was.
   */
  replicate(key: string, d: { mode: "not-modified" | "patches" | "full"; version: number; baseVersion: number; parts: ReplicaPart[] }): void {
    const received = d.parts.flatMap((p) => (p.file ? [p.file] : []));
    let installed = false;
    try {
      if (d.mode === "not-modified") return;
      const existing = this.objects.get(key);
      if (d.mode === "patches" && (!existing || existing.baseVersion !== d.baseVersion)) throw new ObjectNotFoundError(`replica of '${userKey(key)}' cannot take patches: base missing`, objectIds(key));
      const parts: StoredPart[] = d.parts.map((p) => ({ kind: p.kind, dtype: p.dtype, size: p.size, version: p.version, sums: p.sums ?? (p.data ? sumsOf(p.data) : undefined), ...(p.data ? { data: p.data } : {}) }));
      for (const pool of ["mem", "file"] as const) {
        const bytes = parts.filter((p) => this.poolOf(p) === pool).reduce((n, p) => n + p.size, 0);
        if (bytes > 0) this.makeRoom(bytes, key, d.mode === "full" && existing ? charged(existing, pool, this) : 0, pool);
      }
      const targets = this.replicaFiles(key, d);
      d.parts.forEach((p, i) => {
        // Received at its place already (a copy others could follow while it arrived), or renamed there now.
        if (p.file && p.file !== targets[i]) renameSync(p.file, targets[i]!);
      });
      const baseCount = d.mode === "full" ? parts.filter((p) => p.version === d.baseVersion).length : 0;
      if (d.mode === "patches") {
        existing!.patches.push(...parts);
        existing!.version = d.version;
        existing!.lastUsed = ++this.clock;
      } else {
        if (existing) {
          this.release(existing);
          removeFiles(this.filesOf(existing).filter((f) => !targets.includes(f)));
        }
        this.objects.set(key, { key, version: d.version, baseVersion: d.baseVersion, base: parts[0]!, more: parts.slice(1, baseCount), patches: parts.slice(baseCount), pinned: false, lastUsed: ++this.clock, readers: 0 });
      }
      for (const p of parts) {
        const pool = this.poolOf(p);
        if (pool) this.used[pool] += p.size;
      }
      this.evicted.delete(key);
      installed = true;
    } finally {
      if (!installed) for (const f of received) rmSync(f, { force: true });
    }
  }

  /**
   * Where the parts of an incremental answer `d` live once installed: in a
   * full answer the base's parts come first (all at the base version), then
   * the patches. A fetch may write them there directly when none exists yet
   * (`freeReplicaFiles`), so its files keep their names when it completes.
   */
  replicaFiles(key: string, d: { mode: string; baseVersion: number; parts: Array<{ version: number }> }): string[] {
    const baseCount = d.mode === "full" ? d.parts.filter((p) => p.version === d.baseVersion).length : 0;
    if (d.mode === "full" && baseCount === 0) throw new HearthError(`replica of '${userKey(key)}': a full answer without its base`);
    return d.parts.map((p, i) => (i < baseCount ? this.baseFile(key, d.baseVersion, i) : this.patchFile(key, p.version)));
  }

  /** replicaFiles, when none of them exists yet (no copy this store holds uses them); else undefined. */
  freeReplicaFiles(key: string, d: { mode: string; baseVersion: number; parts: Array<{ version: number }> }): string[] | undefined {
    const files = this.replicaFiles(key, d);
    return files.some((f) => existsSync(f)) ? undefined : files;
  }

  /** Reads relative to the version the caller holds: not-modified, patches after it, or everything. */
  read(key: string, have?: number, haveBase?: number): ReadResult {
    const obj = this.objects.get(key);
    if (!obj) {
      const why = this.evicted.get(key);
      if (why) throw new ObjectEvictedError(`object '${userKey(key)}' was evicted: ${why}`, objectIds(key));
      throw new ObjectNotFoundError(`no object '${userKey(key)}' in this app`, objectIds(key));
    }
    obj.lastUsed = ++this.clock;
    if (have === obj.version && (haveBase === undefined || haveBase === obj.baseVersion)) {
      return { mode: "not-modified", version: obj.version, baseVersion: obj.baseVersion, object: obj };
    }
    // Patches bridge the gap only if the caller holds this base and a version inside its patch history.
    const bridge = have !== undefined && have >= obj.baseVersion && have < obj.version && (haveBase === undefined || haveBase === obj.baseVersion);
    const parts = bridge ? obj.patches.filter((p) => p.version > have) : allParts(obj);
    this.load(obj, parts);
    return { mode: bridge ? "patches" : "full", version: obj.version, baseVersion: obj.baseVersion, parts, object: obj };
  }

  /** The file of a large part of `obj` (its bytes are there, not in memory). */
  pathOf(obj: StoredObject, part: StoredPart): string {
    if (part === obj.base) return this.baseFile(obj.key, obj.baseVersion, 0);
    const i = obj.more.indexOf(part);
    return i >= 0 ? this.baseFile(obj.key, obj.baseVersion, i + 1) : this.patchFile(obj.key, part.version);
  }

  /** Count and bytes of the objects whose keys start with `prefix`, and (with `keys`) their keys without the app part, sorted, at most `keys`. */
  summary(prefix: string, keys = 0): { objects: number; bytes: number; keys?: string[]; keysLeftOut?: number } {
    let objects = 0;
    let bytes = 0;
    const names: string[] = [];
    for (const o of this.objects.values()) {
      if (!o.key.startsWith(prefix)) continue;
      objects++;
      bytes += sizeOf(o);
      if (keys > 0) names.push(userKey(o.key));
    }
    if (keys === 0) return { objects, bytes };
    names.sort();
    return { objects, bytes, keys: names.slice(0, keys), ...(names.length > keys ? { keysLeftOut: names.length - keys } : {}) };
  }

  /** Looks an object up without touching its bytes. */
  peek(key: string): StoredObject | undefined {
    return this.objects.get(key);
  }

  /**
   * Deletes every object whose key starts with `prefix` (with `scratchOnly`,
   * only scratch objects); returns how many. A transfer still reading one
   * finishes from what it holds (the buffers of small parts, an open
   * descriptor of each large part's file). With a data dir each object
   * leaves the disk (its metadata file first: the commit point) before it
   * leaves memory; if the disk refuses, the objects not yet deleted stay
   * whole and an ObjectStorageError says how many went, so a retry finishes the job.
   */
  delete(prefix: string, opts: { scratchOnly?: boolean } = {}): number {
    let n = 0;
    for (const [key, obj] of [...this.objects]) {
      if (!key.startsWith(prefix) || (opts.scratchOnly && !obj.scratch)) continue;
      if (this.dir) {
        try {
          rmSync(this.metaFile(key), { force: true });
        } catch (err) {
          throw storageError("delete", key, err, n > 0 ? ` (${n} other object${n === 1 ? " was" : "s were"} deleted before it)` : "");
        }
      }
      removeFiles(this.filesOf(obj));
      this.release(obj);
      this.objects.delete(key);
      n++;
    }
    // One flush for the whole delete: the removed manifests stay removed after a power loss.
    if (this.dir && n > 0 && this.opts.sync !== false) {
      try {
        syncDirSync(this.dir);
      } catch {
        // Removed already; only the flush is in doubt.
      }
    }
    return n;
  }

  /** Bytes in `pool` that a write of `op` to `key` releases when it commits: a new base frees the old one and its patches. */
  freedBy(op: WriteOp, key: string, pool: Pool = "mem"): number {
    const existing = this.objects.get(key);
    return op !== "patch" && existing ? charged(existing, pool, this) : 0;
  }

  /** The pool a part of `size` bytes is charged to (null: not bounded here, a large part in the data dir). */
  poolFor(size: number): Pool | null {
    if (!isFilePart(size)) return "mem";
    if (this.dir) return null;
    return this.opts.fileLimit !== undefined ? "file" : "mem";
  }

  /**
   * Makes sure `bytes` more fit in `pool` (`freed`: bytes the write itself
   * releases, an old base and its patches), evicting least recently used
   * objects; throws CacheFullError naming the object and the limit, with
   * nothing changed.
   */
  makeRoom(bytes: number, forKey: string, freed = 0, pool: Pool = "mem"): void {
    let limit = pool === "mem" ? this.opts.memLimit : this.opts.fileLimit!;
    // Files also stop where their file system does (a tmpfs other caches share): room is what it has free.
    const free = pool === "file" ? this.opts.spaceLeft?.() : undefined;
    if (free !== undefined) limit = Math.min(limit, this.used.file + this.extraFiles() + free);
    // Writes planned and not yet applied (a group commit) hold their room too, and files outside the store its limit bounds.
    const held = (): number => this.used[pool] + this.reserved[pool] + (pool === "file" ? this.extraFiles() : 0) - freed + bytes;
    if (held() <= limit) return;
    const what = `'${userKey(forKey)}'`;
    const which = pool === "mem" ? "memory limit" : free !== undefined && limit < this.opts.fileLimit! ? "file limit (what its file system has free)" : "file limit";
    if (bytes > limit) {
      throw new CacheFullError(`cannot store ${formatBytes(bytes)} for ${what}: larger than the cache's ${which} of ${formatBytes(limit)}; ${pool === "mem" ? "start the head with a larger --mem-limit" : "raise the agent's --cache-limit, or give it a --cache-dir with more room"}`, { ...objectIds(forKey), size: bytes, limit });
    }
    const victims = [...this.objects.values()]
      .filter((o) => !o.pinned && o.readers === 0 && o.key !== forKey && charged(o, pool, this) > 0)
      .sort((a, b) => a.lastUsed - b.lastUsed);
    for (const v of victims) {
      if (held() <= limit) break;
      this.evict(v);
    }
    // Then what the store does not hold itself (a node's folders), least recently used first.
    while (pool === "file" && held() > limit && this.opts.extraFiles?.dropOne()) {
      // dropped one
    }
    if (held() > limit) {
      throw new CacheFullError(
        `cannot store ${formatBytes(bytes)} for ${what}: the cache holds ${formatBytes(this.used[pool] + (pool === "file" ? this.extraFiles() : 0))} of its ${formatBytes(limit)} ${which} in pinned or in-transfer objects; ` +
          (pool === "mem" ? `delete or unpin objects, raise --mem-limit, or run the head with --data-dir so objects can spill to disk` : `delete objects, or raise the agent's --cache-limit`),
        { ...objectIds(forKey), size: bytes, limit },
      );
    }
  }

  /** Bytes of files outside the store that its file limit bounds (a node's folders). */
  private extraFiles(): number {
    return this.opts.extraFiles?.bytes() ?? 0;
  }

  /** Every large part's file this store holds (a node's folders tell their own bytes from these). */
  partFiles(): string[] {
    const out: string[] = [];
    for (const o of this.objects.values()) for (const p of allParts(o)) if (isFilePart(p.size)) out.push(this.pathOf(o, p));
    return out;
  }

  private poolOf(p: StoredPart): Pool | null {
    return this.poolFor(p.size);
  }

  private evict(o: StoredObject): void {
    this.stats.evictions++;
    if (this.dir) {
      this.stats.spills++;
      this.dropData(o); // still on disk; read() reloads it
      return;
    }
    this.release(o);
    removeFiles(this.filesOf(o));
    this.objects.delete(o.key);
    this.evicted.set(o.key, `the cache needed room (limit ${formatBytes(this.opts.memLimit)}) and the head has no --data-dir; pin objects you need to keep`);
    if (this.evicted.size > MAX_TOMBSTONES) this.evicted.delete(this.evicted.keys().next().value!);
  }

  /**
   * A replaced version leaves the accounting, but what a reader holds stays
   * with it: the buffers of its small parts, an open descriptor of each large
   * part's file; the memory goes with the last reference.
   */
  private release(o: StoredObject): void {
    for (const pool of ["mem", "file"] as const) this.used[pool] -= charged(o, pool, this);
  }

  private dropData(o: StoredObject): void {
    for (const p of allParts(o)) {
      if (p.data) this.used.mem -= p.size;
      p.data = undefined;
    }
  }

  private load(o: StoredObject, parts: StoredPart[]): void {
    const missing = parts.filter((p) => !p.data && !isFilePart(p.size));
    if (missing.length === 0) return;
    if (!this.dir) throw new ObjectEvictedError(`object '${userKey(o.key)}' lost its bytes`, objectIds(o.key));
    this.makeRoom(missing.reduce((n, p) => n + p.size, 0), o.key);
    const all = allParts(o);
    for (const p of missing) {
      // Back from disk: checked against the sums recorded at its write, so a changed file is refused, not served.
      p.data = readSmallPart(this.pathOf(o, p), p.size, p.sums, o.key, all.indexOf(p));
      this.used.mem += p.size;
    }
    this.stats.reloads++;
  }

  // ---- files --------------------------------------------------------------------

  /** The folder of `key`'s part files: the data dir, the caller's per-app folder, or the spool. */
  private partDir(key: string): string {
    return this.dir ?? this.opts.files?.dirFor(key) ?? this.spool ?? this.open().spool!;
  }

  private patchFile(key: string, version: number): string {
    return patchFileIn(this.partDir(key), key, version);
  }

  private baseFile(key: string, baseVersion: number, index = 0): string {
    return baseFileIn(this.partDir(key), key, baseVersion, index);
  }

  /** The metadata file: the commit point of every write and delete of its object. */
  private metaFile(key: string): string {
    return path.join(this.dir!, `${keyHash(key)}.json`);
  }

  /** The files an object has: all of its parts with a data dir, its large parts without. */
  private filesOf(o: StoredObject): string[] {
    return allParts(o).filter((p) => this.dir || isFilePart(p.size)).map((p) => this.pathOf(o, p));
  }

  private loadIndex(): void {
    for (const o of readStoredIndex(this.dir!)) this.objects.set(o.key, o);
  }
}

/** Bytes of `o` charged to `pool` now (small parts in memory, large parts' files outside a data dir). */
function charged(o: StoredObject, pool: Pool, store: ObjectStore): number {
  let n = 0;
  for (const p of allParts(o)) {
    if (store.poolFor(p.size) !== pool) continue;
    if (isFilePart(p.size) || p.data) n += p.size;
  }
  return n;
}
