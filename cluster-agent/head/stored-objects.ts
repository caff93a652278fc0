/**
 * What the object store stores (cluster-agent/head/object-store.ts): parts,
 * objects and their manifests, and the helpers over them that the head's
 * object service, the node cache and the upload path share.
 */
import { INLINE_LIMIT } from "../../sdk/cache/transfer.js";
import type { DType, ValueKind } from "../../sdk/cache/values.js";
import { ObjectStorageError, type ObjectIds } from "../../sdk/errors/index.js";

/** One stored part: the base or a patch. `data` holds a small part's bytes (undefined while spilled, and always for a large part: its bytes are in its file). */
export interface StoredPart {
  kind: ValueKind;
  dtype?: DType;
  size: number;
  version: number;
  data?: Buffer;
  /**
   * CRC-32 of each CHUNK of the part, recorded when it was received (sdk/cache/file-io.ts):
   * every read of its file checks them. Undefined for a part a data dir stored before sums existed.
   */
  sums?: number[];
}

/** A versioned object: a base of one or more parts (a publication's shards), then appended patches of one part each. */
export interface StoredObject {
  key: string;
  version: number;
  baseVersion: number;
  /** The base's first part. */
  base: StoredPart;
  /** The base's further parts, in order (usually none). */
  more: StoredPart[];
  patches: StoredPart[];
  pinned: boolean;
  /** Owned by its app's session: deleted when the head releases the app (ObjectService.releaseApp). */
  scratch?: boolean;
  lastUsed: number;
  /** Transfers in progress that read this object. */
  readers: number;
}

/** What a read returns. */
export type ReadResult =
  | { mode: "not-modified"; version: number; baseVersion: number; object: StoredObject }
  | { mode: "patches" | "full"; version: number; baseVersion: number; parts: StoredPart[]; object: StoredObject };

/**
 * Where large parts live outside a data dir (a node cache: one folder per
 * app, readable by that app's executors). The caller makes the folder with
 * its owner and mode, and creates received files with theirs (a rename into
 * place keeps both).
 */
export interface PartFiles {
  /** The folder of `key`'s large parts. */
  dirFor(key: string): string;
}

/** Options of the store. */
export interface ObjectStoreOptions {
  /** Bytes of small parts kept in memory at most (and of large parts' files when neither a data dir nor fileLimit is set). */
  memLimit: number;
  /** Folder for write-through persistence; objects reload from it after a restart. Large parts are files here. */
  dataDir?: string;
  /** Where large parts live without a data dir (default: a private spool folder made by open()). */
  files?: PartFiles;
  /** Bytes the store may still add on the file system of `files` (a node cache's: its limit is also what that file system has left). */
  spaceLeft?: () => number | undefined;
  /**
   * Files outside the store that its file limit also bounds (a node cache's folders: hard links keep a
   * part's bytes after the store dropped it): their bytes, and a way to drop the least recently used.
   */
  extraFiles?: { bytes(): number; dropOne(): boolean };
  /** The parent of that spool folder (default the OS temp folder; the head picks memory-backed /dev/shm where it has room). */
  spoolDir?: string;
  /** Bytes of large parts' files at most, outside a data dir (default: they count against memLimit). */
  fileLimit?: number;
  /**
   * With a data dir, flush every commit to the disk before it is reported (part files, their folder,
   * then the manifest; docs/architecture.md, "Durability"). Default true; false only to measure what it costs.
   */
  sync?: boolean;
}

/** A write: create (`put`), replace the base (`update`), or append (`patch`). */
export type WriteOp = "put" | "update" | "patch";

/** A large part's bytes as they were received into a file, ready to be committed. */
export interface PartFile {
  kind: ValueKind;
  dtype?: DType;
  size: number;
  /** The file holding exactly `size` bytes (made by `receivingFile`): committing renames it into place. */
  file: string;
  /** The chunk sums of the bytes received (checked again if the part is small enough to be kept in memory). */
  sums?: number[];
}

/** A part handed to `replicate`: small with its bytes, or large in a received file. */
export type ReplicaPart = Omit<StoredPart, "data"> & ({ data: Buffer; file?: undefined } | { file: string; data?: undefined });

/** Is a part of `size` bytes a file (larger than what one message carries)? */
export function isFilePart(size: number): boolean {
  return size > INLINE_LIMIT;
}

/** An object's metadata file: what a restarted head reloads (the manifest of its parts; writing it commits a write). */
export type ObjectMeta = Pick<StoredObject, "key" | "version" | "baseVersion" | "pinned" | "scratch"> & { base: Omit<StoredPart, "data">; more?: Array<Omit<StoredPart, "data">>; patches: Array<Omit<StoredPart, "data">> };

/** The `more` entry of a manifest (left out when the base is one part, as older heads wrote it). */
export function moreMeta(more: StoredPart[]): { more?: Array<Omit<StoredPart, "data">> } {
  return more.length > 0 ? { more: more.map(strip) } : {};
}

/** Every part of an object in order: the base's, then the patches. */
export function allParts(o: StoredObject): StoredPart[] {
  return [o.base, ...o.more, ...o.patches];
}

/** What the disk refused, as the error the writer gets: nothing changed, retry when there is room. */
export function storageError(op: string, key: string, err: unknown, note: string, where = "the head's data dir"): ObjectStorageError {
  const code = (err as NodeJS.ErrnoException).code ?? "EIO";
  return new ObjectStorageError(
    `${op} of '${userKey(key)}' failed: ${where} refused it (${(err as Error).message})${note}; nothing changed, retry once the disk has room`,
    { ...objectIds(key), op, code, cause: err },
  );
}

export function strip(p: StoredPart): Omit<StoredPart, "data"> {
  return { kind: p.kind, dtype: p.dtype, size: p.size, version: p.version, ...(p.sums ? { sums: p.sums } : {}) };
}

export function sizeOf(o: StoredObject): number {
  let n = 0;
  for (const p of allParts(o)) n += p.size;
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
