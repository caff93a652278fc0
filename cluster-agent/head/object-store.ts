/**
 * The head's object store: versioned objects (a base plus appended patches)
 * in memory under a limit, with LRU eviction of objects that are neither
 * pinned nor being transferred. With a data dir every write and delete
 * reaches the disk first (an object's metadata file is its commit point) and
 * memory follows only if the disk took it, so a refused write leaves no
 * trace, eviction only drops the memory copy, and objects survive a head
 * restart as the writers were told. Files are opened, written or read, and closed per operation, so
 * file descriptors stay bounded whatever the object count.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, readdirSync, renameSync, rmSync, writeFileSync } from "node:fs";
import path from "node:path";
import type { DType, ValueKind } from "../../sdk/cache/values.js";
import { CacheFullError, ObjectEvictedError, ObjectNotFoundError, ObjectStorageError, VersionConflictError, type ObjectIds } from "../../sdk/errors/index.js";
import { formatBytes } from "../../sdk/format.js";

/** One stored part: the base or a patch. `data` is undefined while spilled to disk. */
export interface StoredPart {
  kind: ValueKind;
  dtype?: DType;
  size: number;
  version: number;
  data?: Buffer;
}

/** A versioned object. */
export interface StoredObject {
  key: string;
  version: number;
  baseVersion: number;
  base: StoredPart;
  patches: StoredPart[];
  pinned: boolean;
  /** Owned by its app's session: deleted when the head releases the app (ObjectService.releaseApp). */
  scratch?: boolean;
  lastUsed: number;
  /** Transfers in progress that hold this object in memory. */
  readers: number;
}

/** What a read returns. */
export type ReadResult =
  | { mode: "not-modified"; version: number; baseVersion: number; object: StoredObject }
  | { mode: "patches" | "full"; version: number; baseVersion: number; parts: StoredPart[]; object: StoredObject };

/** Options of the store. */
export interface ObjectStoreOptions {
  /** Bytes of object data kept in memory at most. */
  memLimit: number;
  /** Folder for write-through persistence; objects reload from it after a restart. */
  dataDir?: string;
}

/** A write: create (`put`), replace the base (`update`), or append (`patch`). */
export type WriteOp = "put" | "update" | "patch";

const MAX_TOMBSTONES = 10_000;

export class ObjectStore {
  private readonly objects = new Map<string, StoredObject>();
  private readonly evicted = new Map<string, string>();
  private memUsed = 0;
  /** A logical clock for LRU order (milliseconds can tie). */
  private clock = 0;
  /** The objects folder of the data dir, once open() ran; until then (or without a data dir) the store is memory-only. */
  private dir?: string;
  readonly stats = { evictions: 0, spills: 0, reloads: 0 };

  /** Records the options only (no I/O): with a data dir, open() creates its folder and reloads what it holds. */
  constructor(private readonly opts: ObjectStoreOptions) {}

  /**
   * With a data dir: creates its objects folder and reloads the index a
   * previous instance persisted; from then on writes go through to disk.
   * Without one it does nothing. Idempotent; returns this store.
   */
  open(): this {
    if (this.opts.dataDir === undefined || this.dir !== undefined) return this;
    const dir = path.join(this.opts.dataDir, "objects");
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    this.dir = dir;
    this.loadIndex();
    return this;
  }

  /** Object count and bytes (base plus patches, in memory or not), current memory use and limits. */
  usage(): { objects: number; bytes: number; memUsed: number; memLimit: number; persistent: boolean; evictions: number; spills: number; reloads: number } {
    let bytes = 0;
    for (const o of this.objects.values()) bytes += sizeOf(o);
    return { objects: this.objects.size, bytes, memUsed: this.memUsed, memLimit: this.opts.memLimit, persistent: this.dir !== undefined, ...this.stats };
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
   * Applies a write and returns the object. With a data dir the write reaches
   * the disk before memory changes: if the disk refuses it (ENOSPC, EROFS…)
   * its files are removed and the store is as it was, so the same write can be
   * retried and a restarted head reloads exactly what writes reported.
   * Throws VersionConflictError, ObjectNotFoundError, CacheFullError or ObjectStorageError.
   */
  write(op: WriteOp, key: string, value: { kind: ValueKind; dtype?: DType; data: Buffer }, opts: { ifVersion?: number; pin?: boolean; scratch?: boolean } = {}): StoredObject {
    this.check(op, key, opts.ifVersion);
    const existing = this.objects.get(key);
    const version = (existing?.version ?? 0) + 1;
    // A new base replaces the old one and its patches at once: their bytes count as free, so an
    // object that fits as one base plus its history can always be re-based.
    this.makeRoom(value.data.byteLength, key, this.freedBy(op, key));
    const part: StoredPart = { kind: value.kind, dtype: value.dtype, size: value.data.byteLength, version, data: value.data };
    const next: ObjectMeta =
      op === "patch"
        ? { key, version, baseVersion: existing!.baseVersion, pinned: existing!.pinned, ...(existing!.scratch ? { scratch: true } : {}), base: strip(existing!.base), patches: [...existing!.patches.map(strip), strip(part)] }
        : { key, version, baseVersion: version, pinned: opts.pin ?? existing?.pinned ?? false, ...((opts.scratch ?? existing?.scratch) ? { scratch: true } : {}), base: strip(part), patches: [] };
    this.persist(op, next, part);
    // On disk: now memory follows.
    let obj: StoredObject;
    if (op === "patch") {
      obj = existing!;
      obj.patches.push(part);
      obj.version = version;
    } else {
      if (existing) {
        this.release(existing);
        if (this.dir) this.removeFiles(this.filesOf(existing));
      }
      obj = { key, version, baseVersion: version, base: part, patches: [], pinned: next.pinned, lastUsed: 0, readers: 0 };
      if (next.scratch) obj.scratch = true;
      this.objects.set(key, obj);
    }
    obj.lastUsed = ++this.clock;
    this.memUsed += part.size;
    this.evicted.delete(key);
    return obj;
  }

  /**
   * Installs what another store answered to an incremental get, so this copy
   * matches it version for version (agents keep node-local replicas this way).
   */
  replicate(key: string, d: { mode: "not-modified" | "patches" | "full"; version: number; baseVersion: number; parts: Array<Omit<StoredPart, "data"> & { data: Buffer }> }): void {
    const existing = this.objects.get(key);
    if (d.mode === "not-modified") return;
    const bytes = d.parts.reduce((n, p) => n + p.size, 0);
    this.makeRoom(bytes, key);
    const parts = d.parts.map((p) => ({ kind: p.kind, dtype: p.dtype, size: p.size, version: p.version, data: p.data }));
    if (d.mode === "patches") {
      if (!existing || existing.baseVersion !== d.baseVersion) throw new ObjectNotFoundError(`replica of '${userKey(key)}' cannot take patches: base missing`, objectIds(key));
      existing.patches.push(...parts);
      existing.version = d.version;
      existing.lastUsed = ++this.clock;
    } else {
      if (existing) this.release(existing);
      const [base, ...patches] = parts;
      this.objects.set(key, { key, version: d.version, baseVersion: d.baseVersion, base: base!, patches, pinned: false, lastUsed: ++this.clock, readers: 0 });
    }
    this.memUsed += bytes;
    this.evicted.delete(key);
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
    const parts = bridge ? obj.patches.filter((p) => p.version > have) : [obj.base, ...obj.patches];
    this.load(obj, parts);
    return { mode: bridge ? "patches" : "full", version: obj.version, baseVersion: obj.baseVersion, parts, object: obj };
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
   * finishes from the buffers it holds. With a data dir each object leaves the disk (its metadata file first: the
   * commit point) before it leaves memory; if the disk refuses, the objects
   * not yet deleted stay whole and an ObjectStorageError says how many went,
   * so a retry finishes the job.
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
        this.removeFiles(this.filesOf(obj));
      }
      this.release(obj);
      this.objects.delete(key);
      n++;
    }
    return n;
  }

  /** Bytes in memory that a write of `op` to `key` releases when it commits: a new base frees the old one and its patches. */
  freedBy(op: WriteOp, key: string): number {
    const existing = this.objects.get(key);
    return op !== "patch" && existing ? inMemory(existing) : 0;
  }

  /**
   * Makes sure `bytes` more fit in memory (`freed`: bytes the write itself
   * releases, an old base and its patches), evicting least recently used
   * objects; throws CacheFullError naming the object and the limit, with
   * nothing changed.
   */
  makeRoom(bytes: number, forKey: string, freed = 0): void {
    const limit = this.opts.memLimit;
    if (this.memUsed - freed + bytes <= limit) return;
    const what = `'${userKey(forKey)}'`;
    if (bytes > limit) {
      throw new CacheFullError(`cannot store ${formatBytes(bytes)} for ${what}: larger than the cache's memory limit of ${formatBytes(limit)}; start the head with a larger --mem-limit`, { ...objectIds(forKey), size: bytes, limit });
    }
    const victims = [...this.objects.values()]
      .filter((o) => !o.pinned && o.readers === 0 && o.key !== forKey && inMemory(o) > 0)
      .sort((a, b) => a.lastUsed - b.lastUsed);
    for (const v of victims) {
      if (this.memUsed - freed + bytes <= limit) break;
      this.evict(v);
    }
    if (this.memUsed - freed + bytes > limit) {
      throw new CacheFullError(
        `cannot store ${formatBytes(bytes)} for ${what}: the cache holds ${formatBytes(this.memUsed)} of its ${formatBytes(limit)} limit in pinned or in-transfer objects; ` +
          `delete or unpin objects, raise --mem-limit, or run the head with --data-dir so objects can spill to disk`,
        { ...objectIds(forKey), size: bytes, limit },
      );
    }
  }

  private evict(o: StoredObject): void {
    this.stats.evictions++;
    if (this.dir) {
      this.stats.spills++;
      this.dropData(o); // still on disk; read() reloads it
      return;
    }
    this.dropData(o);
    this.objects.delete(o.key);
    this.evicted.set(o.key, `the cache needed room (limit ${formatBytes(this.opts.memLimit)}) and the head has no --data-dir; pin objects you need to keep`);
    if (this.evicted.size > MAX_TOMBSTONES) this.evicted.delete(this.evicted.keys().next().value!);
  }

  /**
   * A replaced version leaves the accounting, but its buffers stay with it: a reader
   * still pulling its chunks holds the parts and finishes that version; the memory
   * goes with the last reference.
   */
  private release(o: StoredObject): void {
    for (const p of [o.base, ...o.patches]) if (p.data) this.memUsed -= p.size;
  }

  private dropData(o: StoredObject): void {
    for (const p of [o.base, ...o.patches]) {
      if (p.data) this.memUsed -= p.size;
      p.data = undefined;
    }
  }

  private load(o: StoredObject, parts: StoredPart[]): void {
    const missing = parts.filter((p) => !p.data);
    if (missing.length === 0) return;
    if (!this.dir) throw new ObjectEvictedError(`object '${userKey(o.key)}' lost its bytes`, objectIds(o.key));
    this.makeRoom(missing.reduce((n, p) => n + p.size, 0), o.key);
    for (const p of missing) {
      p.data = readFileSync(p === o.base ? this.baseFile(o.key, o.baseVersion) : this.patchFile(o.key, p.version));
      this.memUsed += p.size;
    }
    this.stats.reloads++;
  }

  // ---- persistence --------------------------------------------------------------

  private hash(key: string): string {
    return createHash("sha256").update(key).digest("hex").slice(0, 40);
  }

  private patchFile(key: string, version: number): string {
    return path.join(this.dir!, `${this.hash(key)}.${version}.patch`);
  }

  /** A base's file carries its version, so writing a new base never touches the one the metadata on disk names. */
  private baseFile(key: string, baseVersion: number): string {
    return path.join(this.dir!, `${this.hash(key)}.${baseVersion}.base`);
  }

  /** The metadata file: the commit point of every write and delete of its object. */
  private metaFile(key: string): string {
    return path.join(this.dir!, `${this.hash(key)}.json`);
  }

  private filesOf(o: StoredObject): string[] {
    return [this.baseFile(o.key, o.baseVersion), ...o.patches.map((p) => this.patchFile(o.key, p.version))];
  }

  /**
   * Writes the new part's file, then the metadata (temporary file + rename),
   * the commit point: a crash before the rename leaves the previous version
   * on disk whole. On any failure the files this write made are removed and
   * an ObjectStorageError is thrown; memory has not been touched yet.
   */
  private persist(op: WriteOp, meta: ObjectMeta, part: StoredPart): void {
    if (!this.dir) return;
    const partFile = op === "patch" ? this.patchFile(meta.key, part.version) : this.baseFile(meta.key, part.version);
    const metaFile = this.metaFile(meta.key);
    try {
      writeFileSync(partFile, part.data!, { mode: 0o600 });
      writeFileSync(`${metaFile}.tmp`, JSON.stringify(meta), { mode: 0o600 });
      renameSync(`${metaFile}.tmp`, metaFile);
    } catch (err) {
      this.removeFiles([partFile, `${metaFile}.tmp`]);
      throw storageError(op, meta.key, err, "");
    }
  }

  /** Removes files no metadata names any more; one that will not go is left for the disk's owner (it is never read). */
  private removeFiles(files: string[]): void {
    for (const f of files) {
      try {
        rmSync(f, { force: true });
      } catch {
        // Unreferenced: a restart ignores it.
      }
    }
  }

  private loadIndex(): void {
    for (const f of readdirSync(this.dir!)) {
      if (!f.endsWith(".json")) continue;
      try {
        const meta = JSON.parse(readFileSync(path.join(this.dir!, f), "utf8")) as ObjectMeta;
        const base = this.baseFile(meta.key, meta.baseVersion);
        const unversioned = path.join(this.dir!, `${this.hash(meta.key)}.base`); // the layout before base files carried their version
        if (!existsSync(base) && existsSync(unversioned)) renameSync(unversioned, base);
        if (!existsSync(base)) continue;
        this.objects.set(meta.key, { ...meta, lastUsed: 0, readers: 0 });
      } catch {
        // A torn or foreign file: skip it rather than refuse to start.
      }
    }
  }
}

/** An object's metadata file: what a restarted head reloads. */
type ObjectMeta = Pick<StoredObject, "key" | "version" | "baseVersion" | "pinned" | "scratch"> & { base: Omit<StoredPart, "data">; patches: Array<Omit<StoredPart, "data">> };

/** What the disk refused, as the error the writer gets: nothing changed, retry when there is room. */
function storageError(op: string, key: string, err: unknown, note: string): ObjectStorageError {
  const code = (err as NodeJS.ErrnoException).code ?? "EIO";
  return new ObjectStorageError(
    `${op} of '${userKey(key)}' failed: the head's data dir refused it (${(err as Error).message})${note}; nothing changed, retry once the disk has room`,
    { ...objectIds(key), op, code, cause: err },
  );
}

function strip(p: StoredPart): Omit<StoredPart, "data"> {
  return { kind: p.kind, dtype: p.dtype, size: p.size, version: p.version };
}

function sizeOf(o: StoredObject): number {
  let n = o.base.size;
  for (const p of o.patches) n += p.size;
  return n;
}

function inMemory(o: StoredObject): number {
  let n = 0;
  for (const p of [o.base, ...o.patches]) if (p.data) n += p.size;
  return n;
}

/** Keys are stored as `<app>/<key>`; errors show the user's part. */
export function userKey(key: string): string {
  return key.slice(key.indexOf("/") + 1);
}

/** The ids an error about stored key `key` ("app/key") names: the key as the app sees it, and the app. */
export function objectIds(key: string): ObjectIds {
  const at = key.indexOf("/");
  return at < 0 ? { key } : { key: key.slice(at + 1), app: key.slice(0, at) };
}
