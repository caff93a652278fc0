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
 */
import { HearthError } from "../errors/index.js";
import type { Requester } from "../wire/requests.js";
import { download, upload, type WriteResult } from "./transfer.js";
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

interface Held {
  version: number;
  baseVersion: number;
  value: unknown;
}

/** Is this value an ObjectRef? */
export function isObjectRef(v: unknown): v is ObjectRef {
  return typeof v === "object" && v !== null && (v as ObjectRef).$ref === "hearth.object" && typeof (v as ObjectRef).key === "string";
}

/** The client. Drivers get one from `app.objects`, executors from `ctx.objects`. */
export class ObjectCache {
  private readonly held = new Map<string, Held>();
  /** What this client's gets did, for benchmarks and tests. */
  readonly stats = { notModified: 0, patches: 0, full: 0, bytesReceived: 0, bytesSent: 0 };

  /**
   * @param reads where gets go (the head, or an executor's node-local agent)
   * @param writes where writes go (always the head)
   */
  constructor(
    private readonly reads: Requester,
    private readonly writes: Requester = reads,
  ) {}

  /** Stores a new object (version 1). */
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
    return (await this.writes.request<{ deleted: number }>("obj-delete", { prefix })).value.deleted;
  }

  /** The latest value of an object, fetching only what this client has not seen. */
  async get<T = unknown>(ref: ObjectRef | string, opts: GetOptions<T> = {}): Promise<T> {
    const key = keyOf(ref);
    const held = this.held.get(key);
    const d = await download(this.reads, { key, have: held?.version, haveBase: held?.baseVersion });
    this.stats.bytesReceived += d.bytes;
    if (d.mode === "not-modified") {
      this.stats.notModified++;
      return held!.value as T;
    }
    this.stats[d.mode === "full" ? "full" : "patches"]++;
    const decoded = d.parts.map((p) => decodeValue(p.kind, p.data, p.dtype));
    const fold = opts.fold ?? (defaultFold as Fold<T>);
    let value: unknown;
    if (d.mode === "patches") {
      value = await fold(held!.value as T, decoded);
    } else {
      const [base, ...patches] = decoded;
      value = patches.length > 0 || opts.fold ? await fold(base as T, patches) : base;
    }
    this.held.set(key, { version: d.version, baseVersion: d.baseVersion, value });
    return value as T;
  }

  /** The version this client holds for `key`, if any. */
  heldVersion(ref: ObjectRef | string): number | undefined {
    return this.held.get(keyOf(ref))?.version;
  }

  /** Drops this client's copy of `key` (the next get fetches everything). */
  forget(ref: ObjectRef | string): void {
    this.held.delete(keyOf(ref));
  }

  private async write(op: "put" | "update" | "patch", key: string | undefined, value: unknown, opts: { ifVersion?: number; pin?: boolean; scratch?: boolean }): Promise<ObjectRef> {
    const enc = encodeValue(value);
    const r: WriteResult = await upload(this.writes, op, key, enc, opts);
    this.stats.bytesSent += enc.data.byteLength;
    return { $ref: "hearth.object", key: r.key, version: r.version, size: r.size };
  }
}

function keyOf(ref: ObjectRef | string): string {
  if (typeof ref === "string") return ref;
  if (isObjectRef(ref)) return ref.key;
  throw new HearthError("expected an ObjectRef (from put/update/patch) or a key string");
}

/** Arrays and byte strings concatenate; other values cannot take patches without a fold. */
function defaultFold(acc: unknown, patches: unknown[]): unknown {
  if (Array.isArray(acc)) return [...acc, ...patches.flatMap((p) => (Array.isArray(p) ? p : [p]))];
  if (Buffer.isBuffer(acc)) return Buffer.concat([acc, ...(patches as Buffer[])]);
  throw new HearthError(`this object has ${patches.length} patch(es) on a base that is neither an array nor bytes; pass get(ref, { fold: (acc, patches) => … })`);
}
